// A convolution as a linear layer on image patches, for activations stored NHWC
// (n, h, w, c), the layout a GEMM's output rows (n, p, q) x columns (k) already have.
// im2col_nhwc copies the patches into rows: col[(n, p, q), (r, s, c)] =
// x[n, p stride - pad + r, q stride - pad + s, c], 0 in the padding, so the convolution
// is Y = col W with W stored (R S C) x K, run by chapter 5's GEMM, and Y is NHWC again.
// (Chapter 6's im2col is the transpose of this: (C R S) x (N P Q) from NCHW.)
// col2im_nhwc is its adjoint, the backward pass: dx[n, h, w, c] is the sum of dcol over
// every patch entry that copied x[n, h, w, c]. One thread per element of dx gathers its
// at most R S terms: deterministic, no atomics (a scatter from dcol would need them).
// Limit: memory-bound: im2col writes R S times the input (4 bytes each), col2im reads it.
// Launch (both): block (256), grid (ceil(elements / 256)): N P Q R S C elements for
// im2col_nhwc, N H W C for col2im_nhwc.

extern "C" __global__ void im2col_nhwc(int N, int H, int W, int C, int R, int S, int P,
                                       int Q, int stride, int pad,
                                       const float* __restrict__ x,
                                       float* __restrict__ col) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int RSC = R * S * C;
    if (i >= static_cast<long long>(N) * P * Q * RSC) return;
    // (r, s, c), c fastest: coalesced reads of x
    const int j = static_cast<int>(i % RSC);
    const int npq = static_cast<int>(i / RSC);
    const int c = j % C, s = (j / C) % S, r = j / (C * S);
    const int q = npq % Q, p = (npq / Q) % P, n = npq / (P * Q);
    const int h = p * stride - pad + r, w = q * stride - pad + s;
    col[i] = (h >= 0 && h < H && w >= 0 && w < W)
                 ? x[((static_cast<long long>(n) * H + h) * W + w) * C + c]
                 : 0.0f;
}

extern "C" __global__ void col2im_nhwc(int N, int H, int W, int C, int R, int S, int P,
                                       int Q, int stride, int pad,
                                       const float* __restrict__ dcol,
                                       float* __restrict__ dx) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<long long>(N) * H * W * C) return;
    const int c = static_cast<int>(i % C), w = static_cast<int>((i / C) % W);
    const int h = static_cast<int>((i / (static_cast<long long>(C) * W)) % H);
    const int n = static_cast<int>(i / (static_cast<long long>(C) * W * H));
    const int RSC = R * S * C;
    float sum = 0.0f;
    for (int r = 0; r < R; ++r) {
        const int ph = h + pad - r;  // = p stride for the output rows p that used row h
        if (ph < 0 || ph % stride != 0 || ph / stride >= P) continue;
        for (int s = 0; s < S; ++s) {
            const int qw = w + pad - s;
            if (qw < 0 || qw % stride != 0 || qw / stride >= Q) continue;
            const long long npq =
                (static_cast<long long>(n) * P + ph / stride) * Q + qw / stride;
            sum += dcol[npq * RSC + (r * S + s) * C + c];
        }
    }
    dx[i] = sum;
}
