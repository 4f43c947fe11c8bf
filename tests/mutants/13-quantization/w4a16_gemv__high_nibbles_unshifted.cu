#include <cuda_fp16.h>

#define UNROLL 2  // 16-byte chunks per lane in flight at once

extern "C" __global__ void w4a16_gemv(int N, int K, const unsigned char* __restrict__ P,
                                      const float* __restrict__ scale,
                                      const __half* __restrict__ x,
                                      __half* __restrict__ y) {
    const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const uint4* p = reinterpret_cast<const uint4*>(P + (size_t)row * (K / 2));
    const float* s = scale + (size_t)row * (K / 128);
    const int chunks = K / 32;  // 16 bytes = 32 weights; a group of 128 is 4 chunks
    float acc = 0.0f;
    for (int c0 = lane; c0 < chunks; c0 += 32 * UNROLL) {
        uint4 wv[UNROLL];
        for (int u = 0; u < UNROLL; u++)  // all loads first
            if (c0 + 32 * u < chunks) wv[u] = __ldg(p + c0 + 32 * u);
        for (int u = 0; u < UNROLL; u++) {
            const int c = c0 + 32 * u;
            if (c >= chunks) break;
            const unsigned words[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
            float partial = 0.0f;
            for (int j = 0; j < 4; j++) {  // word j: weights 32c + 8j ... + 7
                uint4 xv = __ldg(reinterpret_cast<const uint4*>(x) + 4 * c + j);
                const __half2* xh = reinterpret_cast<const __half2*>(&xv);
                const unsigned lo = words[j], hi = words[j] >> 8;
                for (int i = 0; i < 8; i++) {
                    // nibble i at bit 4p: 0x4B000000 | nibble = 2^23 + n 16^p exactly
                    const int pos = i < 5 ? i : i - 3;
                    const unsigned nib = (i < 5 ? lo : hi) & (0xFu << (4 * pos));
                    const float q16 = __uint_as_float(nib | 0x4B000000u)
                                      - (8388608.0f + (float)(8u << (4 * pos)));
                    const float2 xf = __half22float2(xh[i / 2]);
                    const float xi = (i % 2 ? xf.y : xf.x)
                                     * __uint_as_float((127u - 4 * pos) << 23);
                    partial = fmaf(q16, xi, partial);  // (q 16^p) (x 16^-p)
                }
            }
            acc = fmaf(s[c / 4], partial, acc);
        }
    }
    for (int d = 16; d > 0; d /= 2) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if (lane == 0) y[row] = __float2half_rn(acc);
}
