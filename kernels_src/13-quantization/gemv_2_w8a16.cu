// gemv_2_w8a16: y = (s * Q) x for decode at batch 1, weight-only int8 (Q N x K row-major
// int8, one float32 scale per `group` consecutive weights of a row, scale[n][k / group];
// x, y __half; fp32 accumulation). gemv_1's loop with 1 byte per weight instead of 2: a
// lane's 16-byte load brings 16 weights, matched by 32 bytes of x. The bytes become
// floats without the slow int-to-float instruction: byte b of the word w ^ 0x80808080 (q
// + 128, an unsigned byte) is placed under the exponent of 2^23 with one byte permute
// (0x4B0000uu = 2^23 + q + 128 as a float), and one subtraction of 2^23 + 128 leaves q
// exactly. The 16 products are summed, then scaled once (a group holds whole chunks).
// As in gemv_1, UNROLL steps' loads are issued before their arithmetic.
// Limit: memory-bound, 1 B per weight + 4 / group B of scale (+ x): half of gemv_1's
// bytes, so up to 1.94x its speed; the chapter's target is 2.2x cuBLAS's fp16 GEMV on the
// H100.
// Launch: block 32 * WARPS, grid ceil(N KSPLIT / (ROWS * WARPS)), as gemv_1. K % 16 == 0
// and group % 16 == 0 take the 16-byte path; anything else falls back to one weight per
// lane per step.

#define GEMV_UNROLL 1  // this kernel's default UNROLL and KSPLIT (gemv_common.cuh)
#define GEMV_KSPLIT 2
#include "13-quantization/gemv_common.cuh"

// the 16 halves of x at chunk c as floats
__device__ __forceinline__ void load_x16(const __half* __restrict__ x, int c, float* xf) {
    for (int j = 0; j < 2; j++) {
        uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + 2 * c + j);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(h[i]);
            xf[8 * j + 2 * i] = f.x;
            xf[8 * j + 2 * i + 1] = f.y;
        }
    }
}

// the dot product of 16 int8 weights (one uint4) with 16 floats
__device__ __forceinline__ float dot16_s8(uint4 w, const float* xf) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    float sum = 0.0f;
    for (int j = 0; j < 4; j++) {
        const unsigned u = words[j] ^ 0x80808080u;  // q + 128 in every byte
        for (int b = 0; b < 4; b++) {
            // bytes of the result: (u byte b, 0, 0, 0x4B) = the float 2^23 + q + 128
            float f = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u + b));
            sum = fmaf(f - 8388736.0f, xf[4 * j + b], sum);  // 8388736 = 2^23 + 128
        }
    }
    return sum;
}

// U chunks (16 weights each) of each of the warp's rows from chunk c on, at stride
// STRIDE chunks, all loaded (load_chunks) before the first product; one scale per row
// and chunk.
template <int U>
__device__ __forceinline__ void steps(const signed char* __restrict__ Q,
                                      const float* __restrict__ scale,
                                      const __half* __restrict__ x, int N, int K,
                                      int group, int row0, int c, float* acc) {
    const int groups = (K + group - 1) / group;
    uint4 wv[U][ROWS];
    float s[U][ROWS];
    load_chunks<U, 16>(Q, scale, N, K, group, groups, row0, c, wv, s);
    for (int u = 0; u < U; u++) {
        if (c + STRIDE * u >= K / 16) break;  // past the end of the row (last step)
        float xf[16];
        load_x16(x, c + STRIDE * u, xf);
        for (int r = 0; r < ROWS; r++)
            acc[r] = fmaf(s[u][r], dot16_s8(wv[u][r], xf), acc[r]);
    }
}

extern "C" __global__ void gemv_2_w8a16(int N, int K, int group,
                                        const signed char* __restrict__ Q,
                                        const float* __restrict__ scale,
                                        const __half* __restrict__ x,
                                        __half* __restrict__ y) {
    group = group_size(group);  // -DGROUP_SIZE: a constant
    // lane of the row group: KSPLIT warps act as one wide warp of 32 KSPLIT lanes
    const int lane = threadIdx.x % (32 * KSPLIT);
    const int row0 = (blockIdx.x * (blockDim.x / STRIDE) + threadIdx.x / STRIDE) * ROWS;
    const int groups = (K + group - 1) / group;
    float acc[ROWS] = {};
    if (row0 >= N) {  // no rows: only the shared sums of store_rows wait for this warp
    } else if (K % 16 == 0 && group % 16 == 0) {
        for (int c = lane; c < K / 16; c += STRIDE * UNROLL)
            steps<UNROLL>(Q, scale, x, N, K, group, row0, c, acc);
    } else {
        for (int k = lane; k < K; k += STRIDE) {
            float xk = __half2float(x[k]);
            for (int r = 0; r < ROWS; r++)
                if (row0 + r < N) {
                    size_t n = row0 + r;
                    acc[r] = fmaf((float)Q[n * K + k] * scale[n * groups + k / group], xk,
                                  acc[r]);
                }
        }
    }
    store_rows(acc, row0, N, y);
}
