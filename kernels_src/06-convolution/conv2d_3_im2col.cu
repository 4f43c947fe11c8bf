// conv2d_3_im2col: lower the convolution to one matrix multiplication. im2col copies
// every input value each output needs into a column matrix col of shape
// (C R S) x (N P Q): row (c, r, s), column (n, p, q) holds
// x[n][c][p stride - pad + r dil][q stride - pad + s dil], or 0 in the padding.
// Then Y' = W col is a GEMM with M = K, K_gemm = C R S, N_gemm = N P Q (w is already a
// K x (C R S) row-major matrix), run by chapter 5's kernel; Y' is K x N x P x Q, and
// cnhw_to_nchw puts it back in NCHW.
// Limit: the GEMM at chapter 5's rate, plus writing and reading col, R S times the size
// of x (4 C R S N P Q bytes each way), plus a pass over y: memory that the implicit GEMM
// never touches.
// Launch (both kernels): block (256), grid (ceil(elements / 256)); im2col has
// C R S N P Q elements, cnhw_to_nchw has N K P Q.

extern "C" __global__ void im2col(int N, int C, int H, int W, int R, int S, int P, int Q,
                                  int stride, int pad, int dil,
                                  const float* __restrict__ x, float* __restrict__ col) {
    const int NPQ = N * P * Q;
    // col can pass 2^31 elements
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)C * R * S * NPQ) return;
    // column (n, p, q) fastest: coalesced writes
    const int j = (int)(i % NPQ), row = (int)(i / NPQ);
    const int q = j % Q, p = (j / Q) % P, n = j / (P * Q);
    const int s = row % S, r = (row / S) % R, c = row / (R * S);
    const int h = p * stride - pad + r * dil, ww = q * stride - pad + s * dil;
    const bool inside = h >= 0 && h < H && ww >= 0 && ww < W;
    col[i] = inside ? x[((n * C + c) * H + h) * W + ww] : 0.0f;
}

extern "C" __global__ void cnhw_to_nchw(int N, int K, int PQ,
                                        const float* __restrict__ yt,
                                        float* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // flat index of y (n, k, pq)
    if (i >= N * K * PQ) return;
    const int pq = i % PQ, k = (i / PQ) % K, n = i / (K * PQ);
    y[i] = yt[(k * N + n) * PQ + pq];  // both sides contiguous along pq
}
