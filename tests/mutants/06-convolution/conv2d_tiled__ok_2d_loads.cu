// Correct, another style: the patch is a 2-D array (a padded row length), loaded with a 2-D loop,
// and each output sums its taps in reverse order with fmaf
#define TILE 16
#define MAX_R 7

extern "C" __global__ void conv2d_tiled(int N, int C, int H, int W, int K, int R, int S, int pad,
                                        const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ y) {
    __shared__ float xs[TILE + MAX_R - 1][TILE + MAX_R];  // + 1 column: no bank conflicts
    const int P = H + 2 * pad - R + 1, Q = W + 2 * pad - S + 1;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int q0 = blockIdx.x * TILE, p0 = blockIdx.y * TILE;
    const int n = blockIdx.z / K, k = blockIdx.z % K;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xc = x + ((long long)n * C + c) * H * W;
        for (int i = ty; i < TILE + R - 1; i += TILE) {
            for (int j = tx; j < TILE + S - 1; j += TILE) {
                const int h = p0 - pad + i, ww = q0 - pad + j;
                xs[i][j] = (h >= 0 && h < H && ww >= 0 && ww < W) ? xc[h * W + ww] : 0.0f;
            }
        }
        __syncthreads();
        const float* wc = w + ((long long)k * C + c) * R * S;
        for (int r = R - 1; r >= 0; --r)
            for (int s = S - 1; s >= 0; --s) acc = fmaf(xs[ty + r][tx + s], wc[r * S + s], acc);
        __syncthreads();
    }
    const int p = p0 + ty, q = q0 + tx;
    if (p < P && q < Q) y[(((long long)n * K + k) * P + p) * Q + q] = acc;
}
