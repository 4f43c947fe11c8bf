// gemv_1_fp16: y = W x for decode at batch 1 (W N x K row-major __half, x K __half, y N
// __half; fp32 accumulation). One warp per ROWS rows: in each step every lane loads 16
// bytes (8 halves) of x once and 16 bytes of each of its ROWS rows, so the warp reads
// 512 contiguous bytes of a row per load instruction and x is reused ROWS times from
// registers; a shuffle reduction ends each row. W is read exactly once, so a GEMV is a
// copy of W with arithmetic on the side: 2 flops per 2 bytes, far below any ridge point.
// Limit: memory-bound, 2 B per weight (+ x); expect 85-90% of copy bandwidth once enough
// 16-byte loads are in flight (ROWS x unrolled steps per warp).
// Launch: block 32 * WARPS, grid ceil(N / (ROWS * WARPS)). K % 8 == 0 takes the 16-byte
// path (row starts 16-byte aligned); other K fall back to one half per lane per step.

#include <cuda_fp16.h>

#ifndef ROWS
#define ROWS 2  // rows per warp
#endif

__device__ __forceinline__ float warp_sum(float v) {
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

// acc += the dot product of 8 halves of w and 8 floats of x
__device__ __forceinline__ float dot8(uint4 w, const float* xf, float acc) {
    const __half2* h = reinterpret_cast<const __half2*>(&w);
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        acc = fmaf(f.x, xf[2 * i], acc);
        acc = fmaf(f.y, xf[2 * i + 1], acc);
    }
    return acc;
}

extern "C" __global__ void gemv_1_fp16(int N, int K, const __half* __restrict__ W,
                                       const __half* __restrict__ x,
                                       __half* __restrict__ y) {
    const int lane = threadIdx.x % 32;
    const int row0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * ROWS;
    if (row0 >= N) return;
    float acc[ROWS] = {};
    if (K % 8 == 0) {
        const int chunks = K / 8;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 xv = __ldg(reinterpret_cast<const uint4*>(x) + c);
            float xf[8];
            const __half2* xh = reinterpret_cast<const __half2*>(&xv);
            for (int i = 0; i < 4; i++) {
                float2 f = __half22float2(xh[i]);
                xf[2 * i] = f.x;
                xf[2 * i + 1] = f.y;
            }
            uint4 wv[ROWS];
            for (int r = 0; r < ROWS; r++)  // all loads first: ROWS x 16 B in flight
                wv[r] = row0 + r < N
                    ? __ldg(reinterpret_cast<const uint4*>(W + (size_t)(row0 + r) * K) + c)
                    : make_uint4(0, 0, 0, 0);
            for (int r = 0; r < ROWS; r++) acc[r] = dot8(wv[r], xf, acc[r]);
        }
    } else {
        for (int k = lane; k < K; k += 32) {
            float xk = __half2float(x[k]);
            for (int r = 0; r < ROWS; r++)
                if (row0 + r < N)
                    acc[r] = fmaf(__half2float(W[(size_t)(row0 + r) * K + k]), xk, acc[r]);
        }
    }
    for (int r = 0; r < ROWS; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && row0 + r < N) y[row0 + r] = __float2half_rn(v);
    }
}
