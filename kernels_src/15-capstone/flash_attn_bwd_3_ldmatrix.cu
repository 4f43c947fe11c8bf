// flash_attn_bwd_3_ldmatrix: flash_attn_bwd_2_mma's algorithm (a block owns keys, walks
// the query tiles, keeps dK and dV in registers, adds dQ with atomics; same arrays, prep
// and dQ kernels) with the steps that its header names as its limits:
// 1. ldmatrix. Version 2 feeds each m16n8k16 with 32-bit loads, and B fragments whose k
//    runs down a column with two 16-bit loads per register: per warp and 64-row query
//    tile at D = 64, 672 shared loads for 160 mma, 4.2 per mma. Each load is at least one
//    shared-memory wavefront (one per clock per SM), so the SM's mma waited >= 4.2 clocks
//    each. Here one ldmatrix.x4 (4 wavefronts, 512 B) gives the A fragment of a 16 x 16
//    step or the B fragments of two 8-column tiles, and ldmatrix.trans the column-wise
//    ones (dO and Q for dV and dK, K for dQ, and dS stored key-major for dQ's A): 96
//    ldmatrix.x4 per 160 mma, 0.6 (2.4 wavefronts, 307 B) per mma: 1.75x fewer clocks of
//    shared memory per mma, 7x fewer load instructions.
// 2. cp.async double buffering: the Q and dO tiles (and L, Dl through registers: a row
//    of L is 4 B, below cp.async's 16-byte rows at unaligned S) of query tile j + 1 are
//    copied into the second stage while tile j computes, so no warp waits on global
//    memory at a tile's start; 2 barriers per tile (tile landed, dS complete), not 3.
// 3. causal: the block starts at the query tile of its first key (BC is a multiple of
//    BR), warps whose 16 keys are all above the tile's rows skip it (dQ's k loop stops
//    at the same key), and only tiles crossing the diagonal or S test each element.
// 4. 8 warps, BC = 128 keys per block: half as many dQ atomics as 64 keys (each dQ
//    element gets one per key block and query tile); dS goes to shared memory and each
//    warp adds a 16 x 8 NT block of dQ summed over all BC keys; lanes 2i and 2i + 1 swap
//    halves so that each holds 4 consecutive floats: one float4 atomicAdd on sm_90
//    (#if __CUDA_ARCH__ >= 900), four scalar ones elsewhere.
// Registers per thread: dK, dV 2 (D / 2) fp32, S^T and dP^T 2 (BR / 2), their fp16 A
// fragments 2 (BR / 4): 160 at D = 64, BR = 64 (176 at D = 128, BR = 32) before
// addresses; ptxas (NVRTC 13, sm_90) uses 218 (237), no spills: one block of 256 threads
// per SM (8 warps, as FlashAttention-2's backward); two would need <= 128.
// Limit: shared-memory bandwidth, 2.4 wavefronts per mma: 0.42 mma (4096 flop) per clock
// per SM, about 450 TFLOP/s on an H200 at 1.98 GHz before exp, masks, barriers and
// atomics; expect 200-270 TFLOP/s, 3-4x version 2 and about half of SDPA's backward.
// Each Q/dO fragment still feeds one mma: a warp owning 32 keys (2 m-tiles) would halve
// that traffic but needs 2x the dK/dV registers; wgmma (chapter 12's kernels 4-6) reads
// its B operand from shared memory without ldmatrix: the next steps.
// Compile with -DHEAD_DIM=64 or 128 (default 64), -DWARPS (8), -DBR (64; 32 at
// HEAD_DIM 128 for registers), -DMIN_BLOCKS (1, __launch_bounds__).
// Launch: block 32 * WARPS, grid (ceil(S / BC), BH), BC = 16 WARPS, dynamic shared
// memory ((2 BC + 4 BR) (D + 8) + BC (BR + 8)) x 2 B + 16 BR B: 91 KiB at D = 64,
// BR = 64; 112.5 KiB at D = 128, BR = 32 (the launcher opts in above 48 KiB).
// Q, K, V, dO 16-byte aligned (D a multiple of 8).

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma_16x8x16, ldmatrix_x4(_trans), copy16_zfill

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef BR  // query rows per tile
#define BR 64
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#define D HEAD_DIM
#include "15-capstone/fa_bwd_common.cuh"  // store_dk_dv
#define THREADS (32 * WARPS)
#define BC (16 * WARPS)  // keys per block: 16 per warp
// padded rows (halves): the 8 rows of an ldmatrix matrix start on 8 different groups of
// 4 banks (a row is 16 bytes more than a multiple of 128), so no bank is read twice
#define DP (D + 8)  // K, V, Q, dO tiles
#define BRP (BR + 8)  // dS^T
#define MT (BR / 16)  // dQ: 16-row tiles of the query tile, one per warp of a column
#define NT (D / 8 / (WARPS / MT))  // dQ: 8-column tiles per warp
#define LOG2E 1.4426950408889634f

static_assert(D % 16 == 0 && BR % 16 == 0 && BC % BR == 0, "tile shape");
static_assert(WARPS % MT == 0 && NT % 2 == 0 && 2 * BR <= THREADS, "dQ split, L staging");

// Copy rows [row0, row0 + ROWS) of an [S, D] matrix into a padded tile, 16 bytes per
// copy (cp.async on sm_80+); rows past S become zeros (cp.async reads nothing there)
template <int ROWS>
__device__ __forceinline__ void copy_rows(__half* tile, const __half* src, int row0,
                                          int S) {
    constexpr int CHUNKS = D / 8, N = ROWS * CHUNKS;  // 16-byte chunks per row, in all
#pragma unroll
    for (int n = 0; n < (N + THREADS - 1) / THREADS; n++) {
        const int i = threadIdx.x + n * THREADS;
        if (N % THREADS != 0 && i >= N) break;
        const int r = i / CHUNKS, c = 8 * (i % CHUNKS);
        const bool valid = row0 + r < S;
        copy16_zfill(tile + r * DP + c, valid ? src + (size_t)(row0 + r) * D + c : src,
                     valid);
    }
}

// acc[nt] (16 x 8 tiles, nt < BR / 8) += X Y^T, X = the warp's 16 rows (A fragments)
// and Y the BR rows of a tile (B fragments: one ldmatrix.x4 for tiles nt, nt + 1):
// S^T = K Q^T and dP^T = V dO^T. Lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void rows_times_rows(float (&acc)[BR / 8][4], const __half* X,
                                                const __half* Y, int lane) {
    const __half* xa = X + (lane % 16) * DP + 8 * (lane / 16);
    const __half* yb = Y + (8 * (lane / 16) + lane % 8) * DP + 8 * (lane / 8 % 2);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        unsigned a[4];
        ldmatrix_x4(a, xa + 16 * kk);
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt += 2) {
            unsigned b[4];
            ldmatrix_x4(b, yb + 8 * nt * DP + 16 * kk);
            mma_16x8x16(acc[nt], a, b);
            mma_16x8x16(acc[nt + 1], a, b + 2);
        }
    }
}

// out[dt] (16 x 8 tiles, dt < D / 8) += A Y, A = the warp's 16 x BR fp16 fragments in
// registers, Y = a BR x D tile, k down its rows: ldmatrix.trans gives the B fragments of
// tiles dt, dt + 1 at once. dV += P^T dO and dK += dS^T Q.
__device__ __forceinline__ void regs_times_tile(float (&out)[D / 8][4],
                                                const unsigned (&a)[BR / 16][4],
                                                const __half* Y, int lane) {
    const __half* yb = Y + (lane % 16) * DP + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < BR / 16; kk++)
#pragma unroll
        for (int dt = 0; dt < D / 8; dt += 2) {
            unsigned b[4];
            ldmatrix_x4_trans(b, yb + 16 * kk * DP + 8 * dt);
            mma_16x8x16(out[dt], a[kk], b);
            mma_16x8x16(out[dt + 1], a[kk], b + 2);
        }
}

// p[0..3] += v: one vector atomic where it exists (compute capability 9.0), else four
__device__ __forceinline__ void atomic_add4(float* p, float4 v) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4*>(p), v);
#else
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
    atomicAdd(p + 2, v.z);
    atomicAdd(p + 3, v.w);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
flash_attn_bwd_3_ldmatrix(int S, float scale, int causal, const __half* __restrict__ Q,
                          const __half* __restrict__ K, const __half* __restrict__ V,
                          const __half* __restrict__ dO, const float* __restrict__ L,
                          const float* __restrict__ Dl, float* __restrict__ dQ,
                          __half* __restrict__ dK, __half* __restrict__ dV) {
    extern __shared__ __align__(16) unsigned char smem[];
    __half* Ks = reinterpret_cast<__half*>(smem);  // [BC][DP]
    __half* Vs = Ks + BC * DP;                      // [BC][DP]
    __half* QdO = Vs + BC * DP;                     // [2 stages][Q, dO][BR][DP]
    __half* dSs = QdO + 4 * BR * DP;                // [BC][BRP]: dS^T, key-major
    float* LDs = reinterpret_cast<float*>(dSs + BC * BRP);  // [2 stages][L, Dl][BR]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    const int k0 = blockIdx.x * BC, kw = 16 * warp;  // the block's and the warp's keys
    const size_t head = (size_t)blockIdx.y * S;
    const __half* Qh = Q + head * D;
    const __half* dOh = dO + head * D;
    // threads < 2 BR stage L (threads < BR) or Dl of row threadIdx.x % BR of a tile
    const bool stager = threadIdx.x < 2 * BR;
    const float* stat = threadIdx.x < BR ? L : Dl;
    const int sr = threadIdx.x % BR;

    // (causal) rows < k0 see none of the block's keys; k0 is a multiple of BR
    const int first = causal ? k0 : 0;
    const int tiles = (S - first + BR - 1) / BR;
    copy_rows<BC>(Ks, K + head * D, k0, S);
    copy_rows<BC>(Vs, V + head * D, k0, S);
    copy_rows<BR>(QdO, Qh, first, S);
    copy_rows<BR>(QdO + BR * DP, dOh, first, S);
    cp_async_commit();
    if (stager) LDs[threadIdx.x] = first + sr < S ? stat[head + first + sr] : 0.f;

    const float scale2 = scale * LOG2E;  // exp(scale s - l) = exp2(scale2 s - l log2 e)
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    for (int j = 0; j < tiles; j++) {
        const int q0 = first + j * BR, st = j % 2;
        const __half* Qs = QdO + st * 2 * BR * DP;
        const __half* dOs = Qs + BR * DP;
        const float* Ls = LDs + st * 2 * BR;
        const float* Dls = Ls + BR;
        cp_async_wait<0>();  // this thread's copies of tile j have landed
        __syncthreads();  // everyone's; and no warp still reads tile j - 1 or dSs
        float stat_next = 0.f;  // tile j + 1 into the other stage, behind tile j's work
        if (j + 1 < tiles) {
            __half* next = QdO + (1 - st) * 2 * BR * DP;
            copy_rows<BR>(next, Qh, q0 + BR, S);
            copy_rows<BR>(next + BR * DP, dOh, q0 + BR, S);
            if (stager && q0 + BR + sr < S) stat_next = stat[head + q0 + BR + sr];
        }
        cp_async_commit();  // possibly empty: the wait above then finds nothing pending
        // the block's keys that rows < min(S, q0 + BR) may see: warps w < nk have work
        const int kmax = min(S, causal ? q0 + BR : S) - k0;
        const int nk = min(BC / 16, (kmax + 15) / 16);
        if (warp < nk) {
            const int key_hi = k0 + kw + 15;  // the warp's last key
            const bool edge = q0 + BR > S || key_hi >= S || (causal && key_hi > q0);
            float s[BR / 8][4] = {}, dp[BR / 8][4] = {};  // S^T, dP^T: 16 keys x BR rows
            rows_times_rows(s, Ks + kw * DP, Qs, lane);
            rows_times_rows(dp, Vs + kw * DP, dOs, lane);
            unsigned pa[BR / 16][4], da[BR / 16][4];  // P^T, dS^T as fp16 A fragments
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                const int ql = 8 * nt + 2 * t;  // the lane's rows ql, ql + 1 of the tile
                const float l2[2] = {Ls[ql] * LOG2E, Ls[ql + 1] * LOG2E};
                const float dl[2] = {Dls[ql], Dls[ql + 1]};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + kw + g + 8 * (e / 2), row = q0 + ql + (e & 1);
                    const bool masked =
                        edge && (row >= S || key >= S || (causal && key > row));
                    const float pe =
                        masked ? 0.f : exp2f(fmaf(s[nt][e], scale2, -l2[e & 1]));
                    s[nt][e] = pe;
                    dp[nt][e] = pe * (dp[nt][e] - dl[e & 1]) * scale;
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {  // the C layout of tiles 2kk, 2kk + 1 is
                    pa[nt / 2][2 * (nt % 2) + h] =  // the A layout of step kk
                        pack_half2(s[nt][2 * h], s[nt][2 * h + 1]);
                    da[nt / 2][2 * (nt % 2) + h] = pack_half2(dp[nt][2 * h],
                                                              dp[nt][2 * h + 1]);
                    // dS^T row (key) kw + g + 8h, columns (rows) ql, ql + 1: one 32-bit
                    // store, the 32 lanes on 32 banks (BRP / 2 = 4 mod 32 words)
                    *reinterpret_cast<unsigned*>(dSs + (kw + g + 8 * h) * BRP + ql) =
                        da[nt / 2][2 * (nt % 2) + h];
                }
            }
            regs_times_tile(dv, pa, dOs, lane);
            regs_times_tile(dk, da, Qs, lane);
        }
        if (stager && j + 1 < tiles) LDs[(1 - st) * 2 * BR + threadIdx.x] = stat_next;
        __syncthreads();  // dSs is complete
        // dQ += dS K: warp w takes 16-row tile w % MT and column tiles n0 ... n0 + NT - 1
        const int r0 = 16 * (warp % MT), n0 = NT * (warp / MT);
        if (q0 + r0 < S) {
            float acc[NT][4] = {};
            // A = dS (rows x keys) from dS^T: .trans, matrices (keys 0-7, rows 0-7),
            // (keys 0-7, rows 8-15), (keys 8-15, rows 0-7), (keys 8-15, rows 8-15)
            const __half* sa = dSs + (8 * (lane / 16) + lane % 8) * BRP + r0 +
                               8 * (lane / 8 % 2);
            const __half* kb = Ks + (lane % 16) * DP + 8 * (lane / 16) + 8 * n0;
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                if (kk >= nk) break;  // keys no row of the tile sees: dS^T not written
                unsigned a[4];
                ldmatrix_x4_trans(a, sa + 16 * kk * BRP);
#pragma unroll
                for (int nt = 0; nt < NT; nt += 2) {
                    unsigned b[4];
                    ldmatrix_x4_trans(b, kb + 16 * kk * DP + 8 * nt);
                    mma_16x8x16(acc[nt], a, b);
                    mma_16x8x16(acc[nt + 1], a, b + 2);
                }
            }
            // lane 2i keeps row g, gets columns 2t + 2, 2t + 3 from lane 2i + 1, which
            // keeps row g + 8 and gets its partner's columns 2t - 2, 2t - 1 of that row
            const bool odd = t & 1;
            const int row = q0 + r0 + g + (odd ? 8 : 0);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float* c = acc[nt];  // selects, not c[odd ? 0 : 2]: no local memory
                const float x = __shfl_xor_sync(0xffffffffu, odd ? c[0] : c[2], 1);
                const float y = __shfl_xor_sync(0xffffffffu, odd ? c[1] : c[3], 1);
                const float4 v = odd ? make_float4(x, y, c[2], c[3])
                                     : make_float4(c[0], c[1], x, y);
                const int col = 8 * (n0 + nt) + 2 * (t & ~1);  // 16-byte aligned
                if (row < S) atomic_add4(&dQ[(head + row) * D + col], v);
            }
        }
    }
    store_dk_dv(dK, dV, dk, dv, head, k0 + kw + g, S, t);
}
