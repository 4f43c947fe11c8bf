// gemm_w4a16_mma: Y = X W^T for a small batch on the Tensor Cores, int4 weights (W4A16).
// X is B x K (__half, row-major, 1 <= B <= 16), W N x K in quantize_int4's format (nibble
// q + 8, one float32 scale per `group` weights of a row) shuffled offline by
// w4a16_gemm.py's shuffle_weights, Y B x N (__half), fp32 accumulation. A GEMV reads the
// weights once per row of X (or keeps B sums per weight); here the batch rides along in
// the mma: each 16 x 16 tile of W is dequantized once, in registers, and multiplies every
// row of X at once. Marlin's idea (Frantar et al., 2024), written for this book.
//
// Mapping: Y^T = W X^T. W is the A operand of mma.sync m16n8k16 (M = 16 rows of W), X^T
// the B operand (n8 = 8 rows of X; B <= 8 takes one n8 tile, up to 16 two). `.row.col`
// wants A as rows of K (W's rows are) and B as columns of K (X's rows are): neither
// operand is transposed, and the 8 or 16 columns of padding are registers set to zero,
// never memory. With W as the n8 operand instead, B = 1 would pad to 16 rows, not 8.
//
// The shuffle (Marlin's layout): the A fragment of a lane (g = lane / 4, t = lane % 4)
// holds 8 values of rows g and g + 8, 8 nibbles: one 32-bit word per 16 x 16 tile.
// Within 64 columns of K the order of k is ours, as long as W and X agree: lane t takes
// columns 16t ... 16t + 15, 4 per mma (sub-step s: 16t + 4s + 0..3). Then its X is 16
// contiguous halves (two 16-byte loads per row of X) and its weights for 16 rows x 64
// columns are 4 words (one 16-byte load). A warp's 32 loads cover 512 contiguous bytes.
// Within a word, nibble 0/4 = row g, columns 4s, 4s + 1 (register a0); 1/5 = row g + 8
// (a1); 2/6 = row g, columns 4s + 2, 4s + 3 (a2); 3/7 = row g + 8 (a3).
// int4 -> fp16 without a conversion per value (gemv_5's exponent trick): OR-ing the
// nibbles at bits 0 and 16 under the exponent of the half 1024 (0x6400) gives the half2
// (1024 + n0, 1024 + n4), minus 1032 = (q0, q4), exact; nibbles 1/5 give 1024 + 16 n,
// and x 1/16 - 72 = q (one HFMA2, exact); the word shifted right by 8 gives a2 and a3
// the same way. 9 instructions make the 8 halves of one mma's A fragment.
// Scales: each mma product over 64 columns of K is summed in fp32 from zero, then
// multiplied by its fp32 scale into the accumulator (q x is exact in the mma), so the
// scales stay fp32 as quantize_int4 made them. Scales are shuffled too, per 16-row tile
// and group: the pair (row g, row g + 8) of a lane is one 8-byte load.
//
// Split-K: a block of WARPS warps owns 16 MT rows of W and the chunks (64 columns of K)
// of its slice blockIdx.y of `splits`; its warps take UNROLL consecutive chunks at a time
// (all loads issued before the first mma), sum in shared memory in warp order, and with
// splits > 1 write an fp32 partial; the last block of a row tile to finish (a counter per
// tile, reset by that block) adds the partials in slice order: deterministic sums.
// Limit: memory-bound, 0.5 B per weight + 4 B per `group` (+ X, the partials): at B <= 16
// the bytes of gemv_5, so the goal is gemv_5's time at B = 1 and up to 3.76x an fp16 GEMM
// (the ratio of the bytes) at B = 16. Per 16 x 64 weights a lane issues 4 mma per n8 tile
// and about 55 other instructions, 36 of them the dequantization (sm_90 SASS).
// Launch: block 32 WARPS, grid (N / (16 MT), splits); partial splits x B x N floats and
// counters N / (16 MT) zeros (kept at zero between launches) when splits > 1.
// Requires N a multiple of 16 MT, K a multiple of 64 and of group, group a multiple of 64
// (the launcher asks N and K multiples of 128), 1 <= B <= 8 NT; X and the shuffled
// weights 16-byte aligned.
// Options: -DMT= (16-row tiles per warp, 4), -DNT= (n8 tiles: 1 for B <= 8, 2 up to 16),
// -DWARPS= (8), -DUNROLL= (chunks per warp whose loads are in flight together, 2),
// -DGROUP_SIZE= (the group as a constant; the argument must equal it), -DTC_SM75 (the
// sm_75 mma: two m16n8k8).

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma_16x8x16

#ifndef MT
#define MT 4  // 16-row tiles of W per warp: X's registers serve MT tiles
#endif
#ifndef NT
#define NT 2  // n8 tiles of the batch: 8 NT rows of X (padding = zero registers)
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef UNROLL
#define UNROLL 2  // UNROLL x MT x 16 bytes of weights per lane in flight
#endif
#define CHUNK 64  // columns of K per shuffled 16-byte load of a lane

static_assert(WARPS * 8 * NT * 16 * MT * 4 <= 48 * 1024, "red[] is over 48 KiB");

__device__ __forceinline__ unsigned as_u32(__half2 h) {
    return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ __half2 as_h2(unsigned u) {
    return *reinterpret_cast<__half2*>(&u);
}

// (a & mask) | bits in one LOP3. Written in C, ptxas makes an AND and an OR (a LOP3 has
// room for one immediate, and ptxas did not spend a register on the other constant); the
// PTX lop3 takes both as register operands, set once. The emulator has no lop3: C there.
__device__ __forceinline__ unsigned and_or(unsigned a, unsigned mask, unsigned bits) {
#ifdef __CUDL_EMULATOR__
    return (a & mask) | bits;
#else
    unsigned d;  // LUT 0xEA = (A & B) | C for A = 0xF0, B = 0xCC, C = 0xAA
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
    return d;
#endif
}

// One shuffled word (8 nibbles) -> the A fragment of one m16n8k16 (8 halves q = n - 8).
__device__ __forceinline__ void dequant_a(unsigned w, unsigned* a) {
    const __half2 k1032 = __float2half2_rn(1032.0f);  // 1024 + 8
    const __half2 k16th = __float2half2_rn(0.0625f), k72 = __float2half2_rn(-72.0f);
    const unsigned v = w >> 8;
    a[0] = as_u32(__hsub2(as_h2(and_or(w, 0x000F000Fu, 0x64006400u)), k1032));
    a[1] = as_u32(__hfma2(as_h2(and_or(w, 0x00F000F0u, 0x64006400u)), k16th, k72));
    a[2] = as_u32(__hsub2(as_h2(and_or(v, 0x000F000Fu, 0x64006400u)), k1032));
    a[3] = as_u32(__hfma2(as_h2(and_or(v, 0x00F000F0u, 0x64006400u)), k16th, k72));
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
gemm_w4a16_mma(int batch, int N, int K, int group, int splits,
               const unsigned* __restrict__ Wq, const float* __restrict__ Ws,
               const __half* __restrict__ X, __half* __restrict__ Y,
               float* __restrict__ partial, unsigned* __restrict__ counters) {
#ifdef GROUP_SIZE
    group = GROUP_SIZE;  // a constant: c * CHUNK / group is a shift, not a division
#endif
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int tile0 = blockIdx.x * MT;  // the block's first 16-row tile
    const int chunks = K / CHUNK, groups = K / group;
    // this block's slice of K, in chunks: near-equal parts, in order
    const int c_begin = (int)((long long)chunks * blockIdx.y / splits);
    const int c_end = (int)((long long)chunks * (blockIdx.y + 1) / splits);
    const uint4* wq = reinterpret_cast<const uint4*>(Wq);
    const float2* ws = reinterpret_cast<const float2*>(Ws);
    float acc[MT][NT][4] = {};

    for (int c0 = c_begin + UNROLL * warp; c0 < c_end; c0 += UNROLL * WARPS) {
        uint4 wv[UNROLL][MT], xv[UNROLL][NT][2];
        float2 sv[UNROLL][MT];
        for (int u = 0; u < UNROLL; u++) {  // every load of the step before the first mma
            const int c = c0 + u;
            if (c >= c_end) continue;  // the slice's last step may be short
            for (int i = 0; i < MT; i++) {
                wv[u][i] = __ldg(wq + ((size_t)(tile0 + i) * chunks + c) * 32 + lane);
                const int grp = c * CHUNK / group;
                sv[u][i] = __ldg(ws + ((size_t)(tile0 + i) * groups + grp) * 8 + g);
            }
            for (int j = 0; j < NT; j++) {
                const int b = 8 * j + g;  // this lane's row of X: columns 16t ... + 15
                const uint4* xp = reinterpret_cast<const uint4*>(
                    X + (size_t)b * K + c * CHUNK + 16 * t);
                const uint4 zero = make_uint4(0, 0, 0, 0);
                xv[u][j][0] = b < batch ? __ldg(xp) : zero;  // padding rows: no load
                xv[u][j][1] = b < batch ? __ldg(xp + 1) : zero;
            }
        }
        for (int u = 0; u < UNROLL; u++) {
            if (c0 + u >= c_end) continue;
            for (int i = 0; i < MT; i++) {
                const uint4 wi = wv[u][i];
                const unsigned words[4] = {wi.x, wi.y, wi.z, wi.w};
                float part[NT][4] = {};  // sum q x over this chunk, scaled below
                for (int s = 0; s < 4; s++) {  // sub-step s: columns 16t + 4s ... + 3
                    unsigned a[4];
                    dequant_a(words[s], a);
                    for (int j = 0; j < NT; j++) {
                        const uint4 h = xv[u][j][s / 2];
                        const unsigned b[2] = {s % 2 ? h.z : h.x, s % 2 ? h.w : h.y};
                        mma_16x8x16(part[j], a, b);
                    }
                }
                for (int j = 0; j < NT; j++) {  // part[j][0, 1]: row g; [2, 3]: row g + 8
                    acc[i][j][0] = fmaf(sv[u][i].x, part[j][0], acc[i][j][0]);
                    acc[i][j][1] = fmaf(sv[u][i].x, part[j][1], acc[i][j][1]);
                    acc[i][j][2] = fmaf(sv[u][i].y, part[j][2], acc[i][j][2]);
                    acc[i][j][3] = fmaf(sv[u][i].y, part[j][3], acc[i][j][3]);
                }
            }
        }
    }

    // The warps' sums, added in warp order. Accumulator (i, j, e): row 16 i + g
    // + 8 (e / 2) of the block, batch row 8 j + 2 t + e % 2.
    __shared__ float red[WARPS][8 * NT][16 * MT];
    for (int i = 0; i < MT; i++)
        for (int j = 0; j < NT; j++)
            for (int e = 0; e < 4; e++)
                red[warp][8 * j + 2 * t + e % 2][16 * i + g + 8 * (e / 2)] = acc[i][j][e];
    __syncthreads();
    const int rows = 16 * MT, n0 = tile0 * 16;
    for (int idx = threadIdx.x; idx < batch * rows; idx += blockDim.x) {
        const int b = idx / rows, r = idx % rows;  // consecutive threads, consecutive n
        float v = 0.0f;
        for (int w = 0; w < WARPS; w++) v += red[w][b][r];
        if (splits == 1)
            Y[(size_t)b * N + n0 + r] = __float2half_rn(v);
        else
            partial[((size_t)blockIdx.y * batch + b) * N + n0 + r] = v;
    }
    if (splits == 1) return;

    // Split-K: the last block of this row tile to arrive adds the slices in order. The
    // fence makes this block's partials visible to the device before its arrival counts.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int idx = threadIdx.x; idx < batch * rows; idx += blockDim.x) {
        const int b = idx / rows, r = idx % rows;
        float v = 0.0f;
        for (int sl = 0; sl < splits; sl++)  // __ldcg: from L2, where the others wrote
            v += __ldcg(partial + ((size_t)sl * batch + b) * N + n0 + r);
        Y[(size_t)b * N + n0 + r] = __float2half_rn(v);
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;  // ready for the next launch
}
