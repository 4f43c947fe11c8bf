// Scales the value written to y but keeps the unscaled x in the tile: yt misses the loss scale.
#include <cuda_fp16.h>

#define TILE 32

extern "C" __global__ void cast_transpose(const float* __restrict__ x,
                                          __half* __restrict__ y, __half* __restrict__ yt,
                                          int rows, int cols, float scale) {
    __shared__ float tile[TILE][TILE + 1];
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            const float v = x[(long long)r * cols + c];
            tile[i][threadIdx.x] = v;
            if (y) y[(long long)r * cols + c] = __float2half_rn(scale * v);
        }
    }
    if (!yt) return;
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int c = c0 + i, r = r0 + threadIdx.x;
        if (r < rows && c < cols)
            yt[(long long)c * rows + r] = __float2half_rn(tile[threadIdx.x][i]);
    }
}
