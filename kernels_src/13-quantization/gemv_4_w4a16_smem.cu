// gemv_4_w4a16_smem: gemv_3_w4a16 with x prepared once per block instead of once per
// warp. In gemv_3 every warp converts its 32 halves of x per chunk to floats and scales
// them by 16^-p (32 conversions + 32 multiplies per 32 weights, shared only by the warp's
// ROWS rows): nearly as many instructions as the unpacking itself. Here the block's
// threads first write all of x, converted and pre-scaled, to shared memory (K floats),
// laid out as float4 number i of chunk c at [i][c], so the 32 lanes of a warp, reading
// chunks c, c + 1, ..., touch consecutive 16-byte words (no bank conflicts); then every
// warp runs gemv_3's loop reading x with 8 shared-memory loads per chunk and no
// arithmetic.
// Limit: memory-bound, 0.5 B per weight + 4 / group B of scale; the arithmetic left per
// weight is one LOP3, one FADD and one FFMA.
// Launch: block 32 * WARPS, grid ceil(N KSPLIT / (ROWS * WARPS)) as gemv_1, shared_mem
// 4 K bytes. Requires K % 32 == 0 and group % 32 == 0 (no scalar fallback: use gemv_3
// for other shapes).

#define GEMV_UNROLL 4  // this kernel's default UNROLL and KSPLIT (gemv_common.cuh)
#define GEMV_KSPLIT 1
#include "13-quantization/gemv_common.cuh"

// nibble i of a word sits at p = i (i < 5) or, in word >> 12, at p = i - 3 (i >= 5)
__device__ __forceinline__ int nibble_pos(int i) { return i < 5 ? i : i - 3; }

// the dot product of 32 int4 weights (one uint4) with chunk c of the prepared x
__device__ __forceinline__ float dot32_s4(uint4 w, const float4* xs, int chunks, int c) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    float sum = 0.0f;
    for (int j = 0; j < 4; j++) {
        const unsigned lo = words[j], hi = words[j] >> 12;
        const float4 xa = xs[(2 * j) * chunks + c], xb = xs[(2 * j + 1) * chunks + c];
        const float xf[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
        for (int i = 0; i < 8; i++) {
            const int p = nibble_pos(i);
            const unsigned bits = ((i < 5 ? lo : hi) & (0xFu << (4 * p))) | 0x4B000000u;
            const float magic = 8388608.0f + (float)(8u << (4 * p));  // 2^23 + 8 * 16^p
            sum = fmaf(__uint_as_float(bits) - magic, xf[i], sum);
        }
    }
    return sum;
}

extern "C" __global__ void gemv_4_w4a16_smem(int N, int K, int group,
                                             const unsigned char* __restrict__ P,
                                             const float* __restrict__ scale,
                                             const __half* __restrict__ x,
                                             __half* __restrict__ y) {
    extern __shared__ float4 xs[];  // K / 4 float4: [8][K / 32]
    const int chunks = K / 32;
    auto prep = [=]() {
        for (int e = threadIdx.x; e < K / 4; e += blockDim.x) {  // 4 values of x each
            // float4 i of chunk c: word i / 2 of the chunk,
            // nibbles 4 (i % 2) .. 4 (i % 2) + 3
            const int c = e / 8, i = e % 8;
            const __half2* h = reinterpret_cast<const __half2*>(x) + 2 * e;
            const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
            const int n0 = 4 * (i % 2);  // nibble index of the first of the four
            float4 v;
            v.x = a.x * __uint_as_float((127u - 4 * nibble_pos(n0)) << 23);
            v.y = a.y * __uint_as_float((127u - 4 * nibble_pos(n0 + 1)) << 23);
            v.z = b.x * __uint_as_float((127u - 4 * nibble_pos(n0 + 2)) << 23);
            v.w = b.y * __uint_as_float((127u - 4 * nibble_pos(n0 + 3)) << 23);
            xs[i * chunks + c] = v;
        }
    };
    // dot(w, c): chunk c's 32 weights w times the prepared x
    rows_prepared_x(P, scale, N, K, group, y, prep, [=](uint4 w, int c) {
        return dot32_s4(w, xs, chunks, c);
    });
}
