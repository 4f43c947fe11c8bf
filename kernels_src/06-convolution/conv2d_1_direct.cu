// conv2d_1_direct: y = conv2d(x, w) in NCHW, one thread per output element.
// x is N x C x H x W, w is K x C x R x S, y is N x K x P x Q with
// P = (H + 2 pad - dil (R - 1) - 1) / stride + 1 (Q likewise).
// Consecutive threads take consecutive q, so stores are coalesced and, at stride 1, so
// are the input loads; every thread reads all C R S weights of its output channel from
// global memory (through L1).
// Limit: 2 loads per FMA, as matmul_2_coalesced: bound by the load units and L1, a few
// TFLOP/s.
// Launch: block (256), grid (ceil(N K P Q / 256)). Indices are int: each tensor < 2^31
// elements.

extern "C" __global__ void conv2d_1_direct(int N, int C, int H, int W, int K, int R,
                                           int S, int P, int Q, int stride, int pad,
                                           int dil,
                                           const float* __restrict__ x,
                                           const float* __restrict__ w,
                                           float* __restrict__ y) {
    // flat index of y: (n, k, p, q), q fastest
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * K * P * Q) return;
    const int q = i % Q, p = (i / Q) % P, k = (i / (P * Q)) % K, n = i / (K * P * Q);
    // top-left input tap (may be padding)
    const int h0 = p * stride - pad, w0 = q * stride - pad;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xc = x + (n * C + c) * H * W;
        const float* wc = w + (k * C + c) * R * S;
        for (int r = 0; r < R; ++r) {
            const int h = h0 + r * dil;
            if (h < 0 || h >= H) continue;  // zero padding: the tap adds nothing
            for (int s = 0; s < S; ++s) {
                const int ww = w0 + s * dil;
                if (ww >= 0 && ww < W) acc += xc[h * W + ww] * wc[r * S + s];
            }
        }
    }
    y[i] = acc;
}
