// grader-test: gpu-only (the CPU emulator does not bounds-check static __shared__ arrays yet)
// Mutant: the shared patch has room for filters up to 5 x 5 only; the patch of a 7 x 7 filter
// (22 x 22 floats) runs past its end
#define TILE 16   // outputs per block along p and q (16 x 16 threads)
#define MAX_R 5   // largest filter the shared patch has room for
#define PATCH (TILE + MAX_R - 1)

extern "C" __global__ void conv2d_tiled(int N, int C, int H, int W, int K, int R, int S, int pad,
                                        const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ y) {
    __shared__ float xs[PATCH * PATCH];
    const int P = H + 2 * pad - R + 1, Q = W + 2 * pad - S + 1;
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TILE + tx;
    const int q0 = blockIdx.x * TILE, p0 = blockIdx.y * TILE;
    const int n = blockIdx.z / K, k = blockIdx.z % K;
    const int IH = TILE + R - 1, IW = TILE + S - 1;  // the tile plus its halo
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xc = x + (n * C + c) * H * W;
        for (int j = tid; j < IH * IW; j += TILE * TILE) {
            const int h = p0 - pad + j / IW, ww = q0 - pad + j % IW;
            xs[j] = (h >= 0 && h < H && ww >= 0 && ww < W) ? xc[h * W + ww] : 0.0f;
        }
        __syncthreads();  // the patch is complete
        const float* wc = w + (k * C + c) * R * S;
        for (int r = 0; r < R; ++r)
            for (int s = 0; s < S; ++s) acc += xs[(ty + r) * IW + tx + s] * wc[r * S + s];
        __syncthreads();  // everyone is done before the next channel overwrites the patch
    }
    const int p = p0 + ty, q = q0 + tx;
    if (p < P && q < Q) y[((n * K + k) * P + p) * Q + q] = acc;
}
