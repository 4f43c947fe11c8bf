// Correct, another style (slow: see tests/gpu/slow_variants): one byte (two weights) per lane and step,
// scalar loads and integer-to-float conversions, the group scale applied per weight
#include <cuda_fp16.h>

#define UNROLL 2  // 16-byte chunks per lane in flight at once

extern "C" __global__ void w4a16_gemv(int N, int K, const unsigned char* __restrict__ P,
                                      const float* __restrict__ scale,
                                      const __half* __restrict__ x,
                                      __half* __restrict__ y) {
    const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const unsigned char* p = P + (size_t)row * (K / 2);
    float acc = 0.0f;
    for (int j = lane; j < K / 2; j += 32) {  // one byte (two weights) per lane per step
        const int b = p[j];
        const float d = (float)((b & 15) - 8) * __half2float(x[2 * j])
                        + (float)((b >> 4) - 8) * __half2float(x[2 * j + 1]);
        acc = fmaf(scale[(size_t)row * (K / 128) + 2 * j / 128], d, acc);
    }
    for (int d = 16; d > 0; d /= 2) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if (lane == 0) y[row] = __float2half_rn(acc);
}
