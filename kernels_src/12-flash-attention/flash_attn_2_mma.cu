// flash_attn_2_mma: FlashAttention-2 style forward, O = softmax(scale Q K^T) V for each
// of BH = batch x heads independent heads, Q, K, V, O row-major [BH, S, D] __half, fp32
// accumulate, plus L = the natural logsumexp of each row of scale Q K^T ([BH, S] float,
// what a backward pass needs to recompute P without storing it). The S x S matrix never
// reaches memory: a block of WARPS warps owns BR = 16 WARPS query rows (one warp per 16
// rows, Q kept in registers as mma fragments) and walks the keys in tiles of BC rows. Per
// tile each warp computes its 16 x BC scores with mma.sync m16n8k16 (K fragments by
// ldmatrix), updates the running row maximum m and sum l (online softmax: the old O and l
// are rescaled by exp(m_old - m_new), only when a score passes m by more than SLACK),
// turns the scores into fp16 P fragments in registers (the accumulator layout of two
// 16 x 8 tiles is the A layout of one 16 x 16 tile) and adds P V (V fragments by
// ldmatrix.trans). Exponentials are exp2 of scores times scale log2(e) minus m (one fused
// multiply-add and one ex2). K and V tiles are double-buffered: on sm_80+ cp.async
// fetches tile j + 1 while tile j is used (with -DSTAGES=3, tiles j + 1 and j + 2, and
// one barrier per tile instead of two); shared tiles are XOR-swizzled by 16-byte chunk
// (chunk c of row r at c ^ (r % 8)) so every ldmatrix is free of bank conflicts.
// causal != 0 masks key > query and skips the key tiles above the diagonal (half the
// work); blocks start from the last rows (the longest under the mask); rows and keys past
// S are masked (zero-filled loads), so any S >= 1 works. The copies, fragment offsets and
// ex2 come from fa_common.cuh, shared with kernel 3.
// sm_75 (T4): two m16n8k8 per k16 step and plain 16-byte copies (define FLASH_SM75 to
// force that path on any GPU, e.g. in a test).
// Limit: one warp per 16 rows re-reads each K/V tile from shared memory once per warp,
// and loads and math share the same warps (no producer warps, no wgmma): the chapter's
// target is 50% of PyTorch's SDPA on the H100 at d = 128.
// Compile with -DHEAD_DIM=64 or 128 (default 128), -DWARPS (4), -DBC (64),
// -DSTAGES (2 or 3), -DMIN_BLOCKS (1), -DSLACK (8, log2 units); BR <= 2 BC.
// Launch: block 32 * WARPS, grid (ceil(S / BR), BH), dynamic shared memory
// 2 * STAGES * BC * HEAD_DIM * 2 bytes (64 KiB at d = 128, BC = 64, STAGES = 2: above
// 48 KiB, the launcher opts in).
// Q, K, V 16-byte aligned.

#define BR (16 * WARPS)  // query rows per block: 16 per warp
#include "12-flash-attention/fa_common.cuh"  // options, copies, ldmatrix offsets, ex2

static_assert(BR <= 2 * BC, "tile shape");

typedef float Frags[BC / 8][4];  // a warp's 16 x BC scores: accumulators of BC / 8 mma

// S = Q K^T for the warp's 16 rows and the BC keys of the tile at Ks
__device__ __forceinline__ void scores(Frags& s, const unsigned (&qf)[D / 16][4],
                                       const __half* Ks, const int* ko) {
#pragma unroll
    for (int nt = 0; nt < BC / 8; nt++)
        for (int e = 0; e < 4; e++) s[nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt += 2) {  // b of key tiles nt and nt + 1
            unsigned b[4];
            ldmatrix_x4(b, Ks + 8 * nt * D + ko[kk % 4] + (kk / 4) * 64);
            mma_16x8x16(s[nt], qf[kk], b);
            mma_16x8x16(s[nt + 1], qf[kk], b + 2);
        }
}

// Online softmax of one tile of scores (keys n0 ...): mask where needed, raise m and
// rescale l and o when a score passes m by over SLACK, then s = P = 2^(s scale2 - m)
// with the row sums in l
__device__ __forceinline__ void softmax(Frags& s, float (&m)[2], float (&l)[2],
                                        float (&o)[D / 8][4], float scale2, int n0,
                                        int wq, int S, int causal) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // mask keys past S and (causal) keys after the row: in the last tile and the
    // tiles that cross the diagonal only
    if (n0 + BC > S || (causal && n0 + BC - 1 > wq)) {
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = n0 + 8 * nt + 2 * t + (e & 1);
                const int row = wq + g + 8 * (e / 2);
                if (key >= S || (causal && key > row)) s[nt][e] = NEG_INF;
            }
    }
    float mx[2] = {NEG_INF, NEG_INF};  // row maxima of the scores
#pragma unroll
    for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
#pragma unroll
    for (int h = 0; h < 2; h++) {  // the 4 threads of a quad hold one row
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        mx[h] *= scale2;  // in log2 units
    }
    // rescale only when a score of the warp's rows passes its m by over SLACK
    if (__any_sync(0xffffffffu, mx[0] > m[0] + SLACK || mx[1] > m[1] + SLACK)) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float m_new = fmaxf(m[h], mx[h]);
            const float base = m_new == NEG_INF ? 0.f : m_new;  // all masked yet
            const float alpha = exp2_ftz(m[h] - base);  // rescales the sums
            m[h] = m_new;
            l[h] *= alpha;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++) {
                o[dt][2 * h] *= alpha;
                o[dt][2 * h + 1] *= alpha;
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float base = m[h] == NEG_INF ? 0.f : m[h];
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            const float p0 = exp2_ftz(fmaf(s[nt][2 * h], scale2, -base));
            const float p1 = exp2_ftz(fmaf(s[nt][2 * h + 1], scale2, -base));
            s[nt][2 * h] = p0;
            s[nt][2 * h + 1] = p1;
            l[h] += p0 + p1;  // this thread's share; the quad adds up at the end
        }
    }
}

// O += P V: the C layout of key tiles 2kk, 2kk + 1 = A layout of k16 step kk
__device__ __forceinline__ void add_pv(float (&o)[D / 8][4], const Frags& s,
                                       const __half* Vs, const int* ao) {
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
        const unsigned a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                               pack_half2(s[2 * kk][2], s[2 * kk][3]),
                               pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dt = 0; dt < D / 8; dt += 2) {  // b of column tiles dt, dt + 1
            unsigned b[4];
            ldmatrix_x4_trans(b, Vs + 16 * kk * D + ao[dt / 2 % 4] + dt / 8 * 64);
            mma_16x8x16(o[dt], a, b);
            mma_16x8x16(o[dt + 1], a, b + 2);
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
flash_attn_2_mma(int S, float scale, int causal, const __half* __restrict__ Q,
                 const __half* __restrict__ K, const __half* __restrict__ V,
                 __half* __restrict__ O, float* __restrict__ L) {
    extern __shared__ __align__(128) unsigned char smem[];
    __half* tiles = reinterpret_cast<__half*>(smem);  // [slot][K, V][BC x D]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // the longest causal rows first
    const int wq = q0 + 16 * warp;  // the warp's first row
    const size_t head = (size_t)blockIdx.y * S * D;
    const __half* Kh = K + head;
    const __half* Vh = V + head;
    // keys of the last tile to visit: all of them, or (causal) up to the block's last row
    const int last = causal ? min(q0 + BR, S) - 1 : S - 1;
    const int tiles_n = last / BC + 1;
    // the lane's ldmatrix offsets: ao for A fragments (Q) and V (.trans), ko for K
    int ao[4], ko[4];
    frag_offsets(ao, lane % 16, lane / 16);
    frag_offsets(ko, (lane / 16) * 8 + lane % 8, (lane / 8) % 2);

    // Q goes through the last slot (free until a tile is fetched into it), tile 0 into
    // slot 0; with 3 stages tile 1 is fetched into slot 1 at once
    __half* const q_slot = tiles + (STAGES - 1) * 2 * BC * D;
    load_tile<BR>(q_slot, Q + head, q0, S);
#if STAGES == 2
    cp_async_commit();
#endif
    load_first_kv(tiles, Kh, Vh, tiles_n, S);
    cp_async_wait<1>();  // all but the newest group: Q (and tile 0 with 3 stages)
    __syncthreads();
    unsigned qf[D / 16][4];  // the warp's 16 x D rows of Q as A fragments
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldmatrix_x4(qf[kk], q_slot + 16 * warp * D + ao[kk % 4] + (kk / 4) * 64);
#if STAGES == 2
    __syncthreads();  // slot 1 is overwritten next
#endif  // (3 stages: the barrier at the top of step 0 comes before slot 2 is refilled)

    const float scale2 = scale * LOG2E;  // exp(scale s) = exp2(scale2 s)
    float o[D / 8][4] = {};
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};  // of rows g, g + 8 (log2 units)
    for (int j = 0; j < tiles_n; j++) {
#if STAGES == 2
        if (j + 1 < tiles_n) {
            __half* next = tiles + ((j + 1) % 2) * 2 * BC * D;
            load_tile<BC>(next, Kh, (j + 1) * BC, S);
            load_tile<BC>(next + BC * D, Vh, (j + 1) * BC, S);
        }
        cp_async_commit();  // possibly empty: one group per tile keeps wait_group 1 right
        cp_async_wait<1>();  // tile j has landed (only tile j + 1 may be in flight)
        __syncthreads();
#else  // tile j has landed once only tile j + 1 may be in flight; after the barrier no
       // warp still reads tile j - 1, so its slot takes tile j + 2
        cp_async_wait<1>();
        __syncthreads();
        if (j + 2 < tiles_n) {
            __half* next = tiles + ((j + 2) % 3) * 2 * BC * D;
            load_tile<BC>(next, Kh, (j + 2) * BC, S);
            load_tile<BC>(next + BC * D, Vh, (j + 2) * BC, S);
        }
        cp_async_commit();  // possibly empty: one group per tile keeps wait_group 1 right
#endif
        const __half* Ks = tiles + (j % STAGES) * 2 * BC * D;
        const __half* Vs = Ks + BC * D;
        const int n0 = j * BC;
        // (causal) every key of the tile above all rows of this warp: nothing to add
        if (!causal || n0 <= wq + 15) {
            Frags s;
            scores(s, qf, Ks, ko);
            softmax(s, m, l, o, scale2, n0, wq, S, causal);
            add_pv(o, s, Vs, ao);
        }
#if STAGES == 2
        __syncthreads();  // the slot is refilled at the next step
#endif
    }
#ifdef FLASH_SM80
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // only empty groups are left
#endif
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int row = wq + g + 8 * h;
        if (row >= S) continue;
        const float inv = 1.f / l[h];
        __half* out = O + head + (size_t)row * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *reinterpret_cast<__half2*>(&out[8 * dt + 2 * t]) =
                __floats2half2_rn(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
        if (t == 0) L[(size_t)blockIdx.y * S + row] = (m[h] + log2f(l[h])) * LN2;
    }
}
