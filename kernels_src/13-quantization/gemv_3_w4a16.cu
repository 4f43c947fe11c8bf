// gemv_3_w4a16: y = (s * Q) x for decode at batch 1, weight-only int4 (two weights per
// byte as quantize_int4 packs them: nibble = q + 8, column 2j in the low nibble of byte
// j; P N x K/2 bytes row-major; one float32 scale per `group` weights of a row; x, y
// __half; fp32 accumulation). A lane's 16-byte load brings 32 weights (4 words of 8).
// Unpacking in registers without shifts per nibble: a nibble at bit 4p (p <= 4) of a word
// is masked and OR-ed under the exponent of 2^23 (one LOP3), giving the float 2^23 + n
// 16^p; subtracting 2^23 + 8 16^p leaves (q) 16^p exactly. The power 16^p is folded into
// x beforehand (x_k 16^-p, exact: a power of two), once per chunk and shared by the
// warp's ROWS rows. Nibbles 5-7 come from the word shifted right by 12 (at p=2..4).
// Limit: memory-bound, 0.5 B per weight + 4 / group B of scale (+ x): a quarter of
// gemv_1's bytes; 3 instructions per weight (LOP3, FADD, FFMA) is close to what the SM
// issues at full HBM speed, so ROWS and UNROLL (steps whose loads are issued together)
// matter here.
// Launch: block 32 * WARPS, grid ceil(N KSPLIT / (ROWS * WARPS)), as gemv_1. Requires K
// even; K % 32 == 0 and group % 32 == 0 take the 16-byte path, others one byte per lane
// per step.

#define GEMV_UNROLL 2  // this kernel's default UNROLL and KSPLIT (gemv_common.cuh)
#define GEMV_KSPLIT 1
#include "13-quantization/gemv_common.cuh"

// nibble i of a word sits at p = i (i < 5) or, in word >> 12, at p = i - 3 (i >= 5)
__device__ __forceinline__ int nibble_pos(int i) { return i < 5 ? i : i - 3; }

// the 32 halves of x at chunk c as floats, x_k scaled by 16^-p of its nibble position
__device__ __forceinline__ void load_x32(const __half* __restrict__ x, int c, float* xf) {
    for (int j = 0; j < 4; j++) {  // 4 x 16 bytes = 4 words of weights
        uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + 4 * c + j);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(h[i]);
            // 2^(-4p) as a float: exponent 127 - 4p
            xf[8 * j + 2 * i] =
                f.x * __uint_as_float((127u - 4 * nibble_pos(2 * i)) << 23);
            xf[8 * j + 2 * i + 1] =
                f.y * __uint_as_float((127u - 4 * nibble_pos(2 * i + 1)) << 23);
        }
    }
}

// the dot product of 32 int4 weights (one uint4) with 32 pre-scaled floats
__device__ __forceinline__ float dot32_s4(uint4 w, const float* xf) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    float sum = 0.0f;
    for (int j = 0; j < 4; j++) {
        const unsigned lo = words[j], hi = words[j] >> 12;
        for (int i = 0; i < 8; i++) {
            const int p = nibble_pos(i);
            const unsigned bits = ((i < 5 ? lo : hi) & (0xFu << (4 * p))) | 0x4B000000u;
            // 2^23 + 8 * 16^p, a constant after unrolling
            const float magic = 8388608.0f + (float)(8u << (4 * p));
            sum = fmaf(__uint_as_float(bits) - magic, xf[8 * j + i], sum);
        }
    }
    return sum;
}

// U chunks (32 weights each) of each of the warp's rows from chunk c on, at stride
// STRIDE chunks, all loaded (load_chunks) before the first product; one scale per row
// and chunk.
template <int U>
__device__ __forceinline__ void steps(const unsigned char* __restrict__ P,
                                      const float* __restrict__ scale,
                                      const __half* __restrict__ x, int N, int K,
                                      int group, int row0, int c, float* acc) {
    const int groups = (K + group - 1) / group;
    uint4 wv[U][ROWS];
    float s[U][ROWS];
    load_chunks<U, 32>(P, scale, N, K, group, groups, row0, c, wv, s);
    for (int u = 0; u < U; u++) {
        if (c + STRIDE * u >= K / 32) break;  // past the end of the row (last step)
        float xf[32];
        load_x32(x, c + STRIDE * u, xf);
        for (int r = 0; r < ROWS; r++)
            acc[r] = fmaf(s[u][r], dot32_s4(wv[u][r], xf), acc[r]);
    }
}

extern "C" __global__ void gemv_3_w4a16(int N, int K, int group,
                                        const unsigned char* __restrict__ P,
                                        const float* __restrict__ scale,
                                        const __half* __restrict__ x,
                                        __half* __restrict__ y) {
    // lane of the row group: KSPLIT warps act as one wide warp of 32 KSPLIT lanes
    const int lane = threadIdx.x % (32 * KSPLIT);
    const int row0 = (blockIdx.x * (blockDim.x / STRIDE) + threadIdx.x / STRIDE) * ROWS;
    const int groups = (K + group - 1) / group;
    const size_t row_bytes = K / 2;
    float acc[ROWS] = {};
    if (row0 >= N) {  // no rows: only the shared sums of store_rows wait for this warp
    } else if (K % 32 == 0 && group % 32 == 0) {
        for (int c = lane; c < K / 32; c += STRIDE * UNROLL)
            steps<UNROLL>(P, scale, x, N, K, group, row0, c, acc);
    } else {
        for (int j = lane; j < K / 2; j += STRIDE) {  // byte j: columns 2j, 2j + 1
            float x0 = __half2float(x[2 * j]), x1 = __half2float(x[2 * j + 1]);
            for (int r = 0; r < ROWS; r++)
                if (row0 + r < N) {
                    size_t n = row0 + r;
                    int b = P[n * row_bytes + j];
                    float d = (float)((b & 15) - 8) * x0 + (float)((b >> 4) - 8) * x1;
                    acc[r] = fmaf(scale[n * groups + 2 * j / group], d, acc[r]);
                }
        }
    }
    store_rows(acc, row0, N, y);
}
