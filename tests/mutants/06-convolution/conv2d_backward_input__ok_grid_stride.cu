// Correct, another style: a grid-stride loop over dx, the channel sum outermost, and the valid
// taps found by stepping p and q instead of testing every (r, s)
extern "C" __global__ void conv2d_backward_input(int N, int C, int H, int W, int K, int R, int S, int P,
                                                 int Q, int stride, int pad, int dil,
                                                 const float* __restrict__ dy,
                                                 const float* __restrict__ w, float* __restrict__ dx) {
    const long long total = (long long)N * C * H * W;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int ww = i % W, h = (i / W) % H, c = (i / ((long long)H * W)) % C;
        const int n = i / ((long long)C * H * W);
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            for (int r = 0; r < R; ++r) {
                const int hh = h + pad - r * dil;
                if (hh < 0 || hh % stride) continue;
                const int p = hh / stride;
                if (p >= P) continue;
                for (int s = 0; s < S; ++s) {
                    const int wq = ww + pad - s * dil;
                    if (wq < 0 || wq % stride) continue;
                    const int q = wq / stride;
                    if (q >= Q) continue;
                    acc = fmaf(dy[(((long long)n * K + k) * P + p) * Q + q],
                               w[(((long long)k * C + c) * R + r) * S + s], acc);
                }
            }
        }
        dx[i] = acc;
    }
}
