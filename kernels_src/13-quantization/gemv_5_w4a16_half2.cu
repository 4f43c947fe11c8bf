// gemv_5_w4a16_half2: gemv_4_w4a16_smem with the int4 unpacking and the products done two
// at a time in half2 instead of one at a time in float. The exponent trick of gemv_3 at
// half precision: a nibble n OR-ed under the exponent of the half 1024 (0x6400) is the
// half 1024 + n, and one LOP3 does it for two nibbles 16 bits apart (mask 0x000F000F:
// columns 0 and 4 of a word's 8). Nibbles 1 and 5 (mask 0x00F000F0) give 1024 + 16 n,
// turned into q = n - 8 by one HFMA2 (x 1/16, - 72); the word shifted right by 8 gives
// columns 2, 6 and 3, 7 the same way. Every step is exact in half precision (integers
// below 2048). x is prepared once per block in shared memory as the matching half2
// pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7) of each word; the 8 products of a word
// are added in half2 (4 per half, a few ulps), then in float.
// Limit: memory-bound, 0.5 B per weight + 4 / group B of scale; about 2 instructions per
// weight (gemv_4: 3 plus its shared-memory loads).
// Launch: block 32 * WARPS, grid ceil(N KSPLIT / (ROWS * WARPS)), shared_mem 2 K bytes.
// Requires K % 32 == 0 and group % 32 == 0 (use gemv_3 for other shapes).

#define GEMV_UNROLL 2  // this kernel's default UNROLL and KSPLIT (gemv_common.cuh)
#define GEMV_KSPLIT 1
#include "13-quantization/gemv_common.cuh"
#ifndef X_BATCH
#define X_BATCH 1  // loads of x per thread in flight at once while x is prepared
#endif

__device__ __forceinline__ __half2 as_half2(unsigned u) {
    return *reinterpret_cast<const __half2*>(&u);
}

// the dot product of 8 int4 weights (one word) with their 4 prepared pairs of x
__device__ __forceinline__ float dot8_s4(unsigned w, uint4 xv) {
    const __half2 k1032 = __float2half2_rn(1032.0f);     // 1024 + 8
    const __half2 k16th = __float2half2_rn(0.0625f), k72 = __float2half2_rn(-72.0f);
    const unsigned v = w >> 8;
    const __half2 q0 = __hsub2(as_half2((w & 0x000F000Fu) | 0x64006400u), k1032);
    const __half2 q1 = __hfma2(as_half2((w & 0x00F000F0u) | 0x64006400u), k16th, k72);
    const __half2 q2 = __hsub2(as_half2((v & 0x000F000Fu) | 0x64006400u), k1032);
    const __half2 q3 = __hfma2(as_half2((v & 0x00F000F0u) | 0x64006400u), k16th, k72);
    __half2 d = __hmul2(q0, as_half2(xv.x));
    d = __hfma2(q1, as_half2(xv.y), d);
    d = __hfma2(q2, as_half2(xv.z), d);
    d = __hfma2(q3, as_half2(xv.w), d);
    const float2 f = __half22float2(d);
    return f.x + f.y;
}

// the dot product of 32 int4 weights (one uint4) with chunk c of the prepared x
__device__ __forceinline__ float dot32_s4(uint4 w, const uint4* xs, int chunks, int c) {
    return dot8_s4(w.x, xs[c]) + dot8_s4(w.y, xs[chunks + c])
           + dot8_s4(w.z, xs[2 * chunks + c]) + dot8_s4(w.w, xs[3 * chunks + c]);
}

extern "C" __global__ void gemv_5_w4a16_half2(int N, int K, int group,
                                              const unsigned char* __restrict__ P,
                                              const float* __restrict__ scale,
                                              const __half* __restrict__ x,
                                              __half* __restrict__ y) {
    group = group_size(group);  // -DGROUP_SIZE: a constant
    extern __shared__ uint4 xs[];  // K / 8 uint4: [4 words][K / 32 chunks]
    const int chunks = K / 32;
    auto prep = [=]() {
        // X_BATCH loads of x per thread are issued before the first is used: one wait for
        // memory instead of X_BATCH
        for (int e0 = threadIdx.x; e0 < K / 8; e0 += X_BATCH * blockDim.x) {
            uint4 h[X_BATCH];  // columns 8e .. 8e + 7: (x0 x1) .. (x6 x7)
            for (int b = 0; b < X_BATCH; b++)
                if (e0 + b * blockDim.x < K / 8)
                    h[b] = __ldg(reinterpret_cast<const uint4*>(x) + e0 + b * blockDim.x);
            for (int b = 0; b < X_BATCH; b++) {
                const int e = e0 + b * blockDim.x;
                if (e >= K / 8) break;
                uint4 v;  // byte_perm 0x5410: both words' low halves, 0x7632: high
                v.x = __byte_perm(h[b].x, h[b].z, 0x5410);  // (x0, x4)
                v.y = __byte_perm(h[b].x, h[b].z, 0x7632);  // (x1, x5)
                v.z = __byte_perm(h[b].y, h[b].w, 0x5410);  // (x2, x6)
                v.w = __byte_perm(h[b].y, h[b].w, 0x7632);  // (x3, x7)
                xs[(e % 4) * chunks + e / 4] = v;
            }
        }
    };
    // dot(w, c): chunk c's 32 weights w times the prepared x
    rows_prepared_x(P, scale, N, K, group, y, prep, [=](uint4 w, int c) {
        return dot32_s4(w, xs, chunks, c);
    });
}
