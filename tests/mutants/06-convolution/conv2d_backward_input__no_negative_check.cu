// Mutant: no test for hh < 0: C's division truncates toward zero, so -1 / 2 == 0 looks like output row 0
extern "C" __global__ void conv2d_backward_input(int N, int C, int H, int W, int K, int R, int S, int P,
                                                 int Q, int stride, int pad, int dil,
                                                 const float* __restrict__ dy,
                                                 const float* __restrict__ w, float* __restrict__ dx) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // flat index of dx: (n, c, h, w), w fastest
    if (i >= N * C * H * W) return;
    const int ww = i % W, h = (i / W) % H, c = (i / (H * W)) % C, n = i / (C * H * W);
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        const int hh = h + pad - r * dil;  // = p * stride if output row p read (h, w) through tap r
        if (hh % stride != 0 || hh / stride >= P) continue;
        const int p = hh / stride;
        for (int s = 0; s < S; ++s) {
            const int wq = ww + pad - s * dil;
            if (wq < 0 || wq % stride != 0 || wq / stride >= Q) continue;
            const int q = wq / stride;
            for (int k = 0; k < K; ++k)
                acc += dy[((n * K + k) * P + p) * Q + q] * w[((k * C + c) * R + r) * S + s];
        }
    }
    dx[i] = acc;
}
