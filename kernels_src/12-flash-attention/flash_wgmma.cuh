// flash_wgmma.cuh: the warpgroup pieces of kernels 4, 5 and 6 (sm_90a): issue S = Q K^T
// and O += P V as asynchronous wgmma groups, the online softmax of one 64 x BC tile of
// scores in the accumulator layout, the end of a tile (O / l and L stored), and the
// cp.async copy of a tile (kernels 4 and 5). The including kernel defines D (128), BC
// (64 or 128), Q_BLOCK and T_BLOCK (bytes of one 64-wide column block of its Q tile and
// of a K or V tile), THREADS, NEG_INF and LN2; tiles use the 128-byte swizzle of
// kernels 4 and 5.

#pragma once
#include "11-tensor-cores/tc_ptx.cuh"  // wgmma wrappers, desc, pack_half2

#ifdef TC_SM90A
// Rows row0 .. row0 + rows - 1 of an [S, 128] matrix into a tile at byte address `tile`
// (two column blocks of rows x 128 bytes), copied by all THREADS threads with cp.async;
// rows past S are zero-filled.
__device__ __forceinline__ void load_tile(unsigned tile, const __half* __restrict__ src,
                                          int row0, int rows, int S) {
    for (int c = threadIdx.x; c < rows * (D / 8); c += THREADS) {
        const int r = c / (D / 8), cc = c % (D / 8);  // row, 16-byte chunk of the row
        const bool valid = row0 + r < S;
        const __half* g = src + (size_t)(valid ? row0 + r : 0) * D + cc * 8;
        const unsigned dst = tile + (cc / 8) * rows * 128 + swz(r * 128 + (cc % 8) * 16);
        cp_async16_zfill(dst, g, valid ? 16 : 0);
    }
}

// The end of a tile: l summed over the four lanes of each of this thread's rows rq and
// rq + 8, O divided by it and stored in fp16, and the log-sum-exp in natural-log units,
// L = (m + log2 l) ln 2, kept for a backward pass. O and L point at the head's first
// row; rows at or past S are not stored.
__device__ __forceinline__ void store_o(const float* o, float* l, const float* m, int rq,
                                        int t, int S, __half* __restrict__ O,
                                        float* __restrict__ L) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int row = rq + 8 * h;
        if (row >= S) continue;
        const float inv = 1.f / l[h];
        __half* out = O + (size_t)row * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *reinterpret_cast<__half2*>(&out[8 * dt + 2 * t]) =
                __floats2half2_rn(o[4 * dt + 2 * h] * inv, o[4 * dt + 2 * h + 1] * inv);
        if (t == 0) L[row] = (m[h] + log2f(l[h])) * LN2;
    }
}

// After a wait: the registers count as written here, so no read of them moves above it.
template <int N> __device__ __forceinline__ void fence_regs(float* r) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
// S += Q K^T (both K-major in shared memory) and O += P V (P in registers, V read
// transposed): the wgmma shapes of tc_ptx.cuh that this kernel uses.
#define wgmma_qk wgmma_64x64x16
#define wgmma_qk_first wgmma_64x64x16_first  // S = Q K^T, not +=
// QK_WIDE (kernel 6): one m64nBCk16 wgmma per k16 step instead of BC / 64 m64n64k16 ones
#if defined(QK_WIDE) && QK_WIDE
#if BC == 64
#define wgmma_qk_wide wgmma_64x64x16
#define wgmma_qk_wide_first wgmma_64x64x16_first
#elif BC == 128
#define wgmma_qk_wide wgmma_64x128x16_kk
#define wgmma_qk_wide_first wgmma_64x128x16_kk_first
#elif BC == 176
#define wgmma_qk_wide wgmma_64x176x16_kk
#define wgmma_qk_wide_first wgmma_64x176x16_kk_first
#elif BC == 192
#define wgmma_qk_wide wgmma_64x192x16_kk
#define wgmma_qk_wide_first wgmma_64x192x16_kk_first
#endif
#endif
#define wgmma_pv wgmma_64x128x16_rs

// Online softmax of one 64 x BC tile of scores (the warpgroup's accumulators, BC / 2 per
// thread) in place: mask, update m and l (log2 units) of rows rq and rq + 8, leave P in s
// and the factor for what O holds so far in alpha.
__device__ __forceinline__ void softmax_rows(float* s, float* m, float* l, float* alpha,
                                             int n0, int S, int causal, int rq, int t,
                                             float scale2) {
    const bool edge = n0 + BC > S || (causal && n0 + BC - 1 > rq);
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int i = 0; i < BC / 2; i++) {
        const int e = i % 4;
        if (edge) {
            const int key = n0 + 8 * (i / 4) + 2 * t + (e & 1);
            if (key >= S || (causal && key > rq + 8 * (e / 2))) s[i] = NEG_INF;
        }
        mx[e / 2] = fmaxf(mx[e / 2], s[i]);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float m_new = fmaxf(m[h], mx[h] * scale2);  // exp(scale s) = exp2(scale2 s)
        const float base = m_new == NEG_INF ? 0.f : m_new;
        alpha[h] = exp2f(m[h] - base);
        m[h] = m_new;
        l[h] *= alpha[h];
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            const float p0 = exp2f(fmaf(s[4 * nt + 2 * h], scale2, -base));
            const float p1 = exp2f(fmaf(s[4 * nt + 2 * h + 1], scale2, -base));
            s[4 * nt + 2 * h] = p0;
            s[4 * nt + 2 * h + 1] = p1;
            l[h] += p0 + p1;
        }
    }
}
// P (fp32, the accumulator layout) as the A fragments of P V, in fp16.
__device__ __forceinline__ void pack_p(const float* s, unsigned (*p)[4]) {
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)  // key tiles 2 kk, 2 kk + 1: one k16 A fragment
#pragma unroll
        for (int r = 0; r < 4; r++)
            p[kk][r] = pack_half2(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}
// Both: the softmax of the tile, then P as A fragments in p.
__device__ __forceinline__ void softmax_tile(float* s, float* m, float* l, float* alpha,
                                             unsigned (*p)[4], int n0, int S, int causal,
                                             int rq, int t, float scale2) {
    softmax_rows(s, m, l, alpha, n0, S, causal, rq, t, scale2);
    pack_p(s, p);
}

// Issue S = Q K^T for the warpgroup's 64 rows and the K tile at ks (one wgmma group):
// per k16 step, one m64n64 wgmma per 64 keys (and one m64n48 for the last 48 of a tile
// of 176), whose accumulators side by side, s[32 n ...], have the layout of one 64 x BC
// accumulator. The first k16 step writes s without adding to it (wgmma_qk_first), so s
// needs no zeroing: instructions that write a wgmma's registers while the warpgroup's
// wgmma run make ptxas wait for each of them.
__device__ __forceinline__ void issue_qk(float* s, unsigned qs, unsigned ks, int wg) {
#ifdef QK_ZERO_FILL
#pragma unroll
    for (int i = 0; i < BC / 2; i++) s[i] = 0.f;
#endif
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const unsigned long long a =
            desc(qs + (kk / 4) * Q_BLOCK + wg * 64 * 128 + (kk % 4) * 32, 16, 1024);
#if defined(QK_WIDE) && QK_WIDE  // all BC keys in one wgmma: its rows follow each other
        const unsigned long long b =
            desc(ks + (kk / 4) * T_BLOCK + (kk % 4) * 32, 16, 1024);
        if (kk == 0)
            wgmma_qk_wide_first(s, a, b);
        else
            wgmma_qk_wide(s, a, b);
#else
#pragma unroll
        for (int n = 0; n < (BC + 63) / 64; n++) {  // keys 64 n ...: 8 KiB further
            const unsigned long long b =
                desc(ks + (kk / 4) * T_BLOCK + n * 64 * 128 + (kk % 4) * 32, 16, 1024);
#ifdef QK_ZERO_FILL  // the first version: s set to 0 before the fence, then += (slower)
            wgmma_qk(s + 32 * n, a, b);
#else
            if (64 * n + 64 > BC)  // BC = 176: the last 48 keys
                kk == 0 ? wgmma_64x48x16_first(s + 32 * n, a, b)
                        : wgmma_64x48x16(s + 32 * n, a, b);
            else if (kk == 0)
                wgmma_qk_first(s + 32 * n, a, b);
            else
                wgmma_qk(s + 32 * n, a, b);
#endif
        }
#endif  // QK_WIDE
    }
    wgmma_commit();
}
// Issue O += P V for the V tile at vs (one wgmma group).
__device__ __forceinline__ void issue_pv(float* o, unsigned (*p)[4], unsigned vs) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)
        wgmma_pv(o, p[kk], desc(vs + kk * 16 * 128, T_BLOCK, 1024));
    wgmma_commit();
}
#endif  // TC_SM90A
