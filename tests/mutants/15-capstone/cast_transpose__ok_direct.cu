// Correct, without shared memory: each thread writes its element of y and of yt straight from
// registers. The writes of yt are strided (a warp touches 32 rows of yt), so it is slower on a
// GPU, but right.
#include <cuda_fp16.h>

extern "C" __global__ void cast_transpose(const float* __restrict__ x,
                                          __half* __restrict__ y, __half* __restrict__ yt,
                                          int rows, int cols, float scale) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    for (int r = blockIdx.y * 32 + threadIdx.y; r < min(rows, (int)(blockIdx.y + 1) * 32);
         r += blockDim.y) {
        if (c >= cols) break;
        const __half h = __float2half_rn(scale * x[(long long)r * cols + c]);
        if (y) y[(long long)r * cols + c] = h;
        if (yt) yt[(long long)c * rows + r] = h;
    }
}
