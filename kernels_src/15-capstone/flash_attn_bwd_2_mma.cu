// flash_attn_bwd_2_mma: flash_attn_bwd_1_smem's backward pass on Tensor Cores, one idea
// more: every product is mma.sync m16n8k16 (fp16 in, fp32 accumulate; on sm_75 two
// m16n8k8). Same arrays, same prep and dQ kernels (flash_attn_bwd_prep.cu). A block
// of WARPS warps owns BC = 16 WARPS keys, a warp 16 of them, and
// computes the transposed products S^T = K Q^T and dP^T = V dO^T for its keys and the
// BR rows of a query tile: in the accumulator layout, P^T = exp(scale S^T - L) and
// dS^T = scale P^T (dP^T - Dl) are at once the A fragments of dV += P^T dO and
// dK += dS^T Q (as P in chapter 12's kernel 2), so dK and dV stay in registers. P^T and
// dS^T are rounded to fp16 for the mma (FlashAttention-2 does the same). dS^T goes to
// shared memory as dS, and the warps share dQ += dS K, column tiles split among them,
// added to global memory with fp32 atomicAdd (why atomics: flash_attn_bwd_1_smem.cu).
// Fragments are read from shared memory with 32-bit loads of fp16 pairs (the 16-bit
// pairs of B fragments whose k runs down a column: two 16-bit loads); rows of D + 8
// halves (4 words more than a multiple of 32) put the 32 lanes' words on 32 banks.
// causal != 0 masks key > query and starts at the query tile holding the block's first
// key; rows and keys past S are zero-filled and masked, so any S >= 1 works.
// Limit: shared-memory loads, not mma: B fragments whose k runs down a column take two
// 16-bit loads per register (ldmatrix.trans would take one instruction per 4 registers),
// Q/dO tiles are not double-buffered (cp.async) and fully masked warps are not skipped:
// the next steps toward FlashAttention-2's backward. SDPA's backward is the baseline.
// Compile with -DHEAD_DIM=64 or 128 (default 64), -DWARPS (4), -DBR (64; use 32 at
// HEAD_DIM 128 for registers and shared memory).
// Launch: block 32 * WARPS, grid (ceil(S / BC), BH), dynamic shared memory
// ((2 BC + 2 BR) (D + 8) + BR (BC + 8)) x 2 B + 8 BR B: 45.5 KiB at D = 64, BR = 64;
// 55.8 KiB at D = 128, BR = 32 (above 48 KiB: the launcher opts in).

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma_16x8x16, pack_half2

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef BR  // query rows per tile
#define BR 64
#endif
#define D HEAD_DIM
#include "15-capstone/fa_bwd_common.cuh"  // store_dk_dv
#define BC (16 * WARPS)  // keys per block: 16 per warp
#define DP (D + 8)  // padded rows of the K, V, Q, dO tiles (halves)
#define BCP (BC + 8)  // padded rows of the dS tile

static_assert(D % 16 == 0 && BR % 16 == 0 && (D / 8) % WARPS == 0, "tile shape");

// 32-bit load of halves (r, c), (r, c + 1) of a padded tile: one fragment register
__device__ __forceinline__ unsigned pair(const __half* tile, int stride, int r, int c) {
    return *reinterpret_cast<const unsigned*>(tile + r * stride + c);
}
// halves (r, c) and (r + 1, c): a fragment register whose k runs down a column
__device__ __forceinline__ unsigned column_pair(const __half* tile, int r, int c) {
    return (unsigned)__half_as_ushort(tile[r * DP + c]) |
           (unsigned)__half_as_ushort(tile[(r + 1) * DP + c]) << 16;
}

// Copy rows [row0, row0 + ROWS) of an [S, D] matrix into a padded tile; rows past S: 0
template <int ROWS>
__device__ __forceinline__ void load_rows(__half* tile, const __half* src, int row0,
                                          int S) {
    for (int i = threadIdx.x; i < ROWS * D / 2; i += 32 * WARPS) {
        const int r = i / (D / 2), c = 2 * (i % (D / 2));
        __half2 v = __float2half2_rn(0.f);
        if (row0 + r < S)
            v = *reinterpret_cast<const __half2*>(src + (size_t)(row0 + r) * D + c);
        *reinterpret_cast<__half2*>(tile + r * DP + c) = v;
    }
}

// acc[nt] (16 x 8 tiles, nt < BR / 8) += A (the warp's 16 rows of X, padded tile) times
// Y^T for the BR rows of Y: S^T = K Q^T and dP^T = V dO^T
__device__ __forceinline__ void rows_times_rows(float (&acc)[BR / 8][4], const __half* X,
                                                const __half* Y) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const int c = 16 * kk + 2 * t;
        const unsigned a[4] = {pair(X, DP, g, c), pair(X, DP, g + 8, c),
                               pair(X, DP, g, c + 8), pair(X, DP, g + 8, c + 8)};
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++) {
            const unsigned b[2] = {pair(Y, DP, 8 * nt + g, c),
                                   pair(Y, DP, 8 * nt + g, c + 8)};
            mma_16x8x16(acc[nt], a, b);
        }
    }
}

// out[dt] (16 x 8 tiles, dt < D / 8) += A B, A = the warp's 16 x BR accumulators in
// registers (fp16-rounded), B = the BR x D tile Y: dV += P^T dO and dK += dS^T Q
__device__ __forceinline__ void regs_times_tile(float (&out)[D / 8][4],
                                                const float (&acc)[BR / 8][4],
                                                const __half* Y) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < BR / 16; kk++) {  // the C layout of tiles 2kk, 2kk + 1 is the A
        const unsigned a[4] = {pack_half2(acc[2 * kk][0], acc[2 * kk][1]),  // layout
                               pack_half2(acc[2 * kk][2], acc[2 * kk][3]),
                               pack_half2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]),
                               pack_half2(acc[2 * kk + 1][2], acc[2 * kk + 1][3])};
        const int r = 16 * kk + 2 * t;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            const unsigned b[2] = {column_pair(Y, r, 8 * dt + g),
                                   column_pair(Y, r + 8, 8 * dt + g)};
            mma_16x8x16(out[dt], a, b);
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
flash_attn_bwd_2_mma(int S, float scale, int causal, const __half* __restrict__ Q,
                     const __half* __restrict__ K, const __half* __restrict__ V,
                     const __half* __restrict__ dO, const float* __restrict__ L,
                     const float* __restrict__ Dl, float* __restrict__ dQ,
                     __half* __restrict__ dK, __half* __restrict__ dV) {
    extern __shared__ __align__(16) unsigned char smem[];
    __half* Ks = reinterpret_cast<__half*>(smem);  // [BC][DP]
    __half* Vs = Ks + BC * DP;                      // [BC][DP]
    __half* Qs = Vs + BC * DP;                      // [BR][DP]
    __half* dOs = Qs + BR * DP;                     // [BR][DP]
    __half* dSs = dOs + BR * DP;                    // [BR][BCP]: dS of the tile pair
    float* Ls = reinterpret_cast<float*>(dSs + BR * BCP);  // [BR]
    float* Dls = Ls + BR;                                  // [BR]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    const int k0 = blockIdx.x * BC, kw = 16 * warp;  // the block's and the warp's keys
    const size_t head = (size_t)blockIdx.y * S;
    load_rows<BC>(Ks, K + head * D, k0, S);
    load_rows<BC>(Vs, V + head * D, k0, S);
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};

    const int first = causal ? k0 / BR : 0;  // (causal) rows < k0 see none of the keys
    for (int q0 = first * BR; q0 < S; q0 += BR) {
        __syncthreads();  // no warp still reads the previous tile's Qs, dOs, dSs
        load_rows<BR>(Qs, Q + head * D, q0, S);
        load_rows<BR>(dOs, dO + head * D, q0, S);
        for (int r = threadIdx.x; r < BR; r += 32 * WARPS) {
            Ls[r] = q0 + r < S ? L[head + q0 + r] : 0.f;
            Dls[r] = q0 + r < S ? Dl[head + q0 + r] : 0.f;
        }
        __syncthreads();
        float p[BR / 8][4] = {}, ds[BR / 8][4] = {};  // S^T, dP^T, then P^T, scale dS^T
        rows_times_rows(p, Ks + kw * DP, Qs);
        rows_times_rows(ds, Vs + kw * DP, dOs);
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int kl = kw + g + 8 * (e / 2), ql = 8 * nt + 2 * t + (e & 1);
                const int key = k0 + kl, row = q0 + ql;
                const bool masked = row >= S || key >= S || (causal && key > row);
                const float pe = masked ? 0.f : expf(p[nt][e] * scale - Ls[ql]);
                p[nt][e] = pe;
                ds[nt][e] = pe * (ds[nt][e] - Dls[ql]) * scale;
                dSs[ql * BCP + kl] = __float2half_rn(ds[nt][e]);
            }
        regs_times_tile(dv, p, dOs);
        regs_times_tile(dk, ds, Qs);
        __syncthreads();  // dSs is complete
        // dQ += dS K: warp w takes column tiles w, w + WARPS, ... of every 16-row tile
#pragma unroll
        for (int mt = 0; mt < BR / 16; mt++) {
            const int r0 = 16 * mt;
            if (q0 + r0 >= S) break;
            for (int dt = warp; dt < D / 8; dt += WARPS) {
                float acc[4] = {};
#pragma unroll
                for (int kk = 0; kk < BC / 16; kk++) {
                    const int c = 16 * kk + 2 * t;
                    const unsigned a[4] = {
                        pair(dSs, BCP, r0 + g, c), pair(dSs, BCP, r0 + g + 8, c),
                        pair(dSs, BCP, r0 + g, c + 8), pair(dSs, BCP, r0 + g + 8, c + 8)};
                    const unsigned b[2] = {column_pair(Ks, c, 8 * dt + g),
                                           column_pair(Ks, c + 8, 8 * dt + g)};
                    mma_16x8x16(acc, a, b);
                }
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = q0 + r0 + g + 8 * (e / 2);
                    const int col = 8 * dt + 2 * t + (e & 1);
                    if (row < S) atomicAdd(&dQ[(head + row) * D + col], acc[e]);
                }
            }
        }
    }
    store_dk_dv(dK, dV, dk, dv, head, k0 + kw + g, S, t);
}
