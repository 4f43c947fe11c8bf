// flash_attn_4_wgmma: the FlashAttention-2 forward of kernels 2-3 (online softmax, causal
// tile skipping, any S; Q, K, V, O [BH, S, 128] __half, L [BH, S] float logsumexp) on
// Hopper's warpgroup instruction wgmma.mma_async (sm_90a only). A warpgroup (4 warps)
// owns 64 query rows; one wgmma m64n64k16 multiplies its 64 rows of Q by 16 columns of a
// 64-key K tile, both read straight from shared memory through descriptors, so S = Q K^T
// costs 8 instructions per tile and no ldmatrix. The accumulators land in the mma.sync
// layout (warp w: rows 16 w + g, + 8), so the online softmax is kernel 2's, and P stays
// in registers as the A operand of O += P V (wgmma m64n128k16, A from registers, V from
// shared memory read transposed: imm-trans-b). WGS warpgroups per block share the K and V
// tiles; while one is in its softmax the others keep the Tensor Cores busy. Shared tiles
// use the 128-byte swizzle wgmma reads (16-byte chunk c of 128-byte row r at c ^ (r % 8),
// 1 KiB atoms; the 128 columns of a row are two 64-wide blocks), filled by cp.async with
// double buffering as in kernel 2; a proxy fence makes the copies visible to wgmma.
// Limit: all warps load, compute and wait in turn (no producer warp, no TMA, no
// intra-warpgroup overlap of softmax and wgmma as FlashAttention-3 does): the chapter's
// target for its best kernel is 80% of PyTorch's SDPA on the H100 at d = 128.
// Compile with -arch=sm_90a (elsewhere the kernel is empty), -DWGS (2), -DMIN_BLOCKS (1).
// Launch: block 128 * WGS, grid (ceil(S / (64 WGS)), BH), dynamic shared memory
// (64 WGS + 256) * 256 + 1024 bytes. Head dimension 128 only; Q, K, V 16-byte aligned.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers

#ifndef WGS
#define WGS 2
#endif
#ifndef MIN_BLOCKS  // blocks per SM that the registers must allow (__launch_bounds__)
#define MIN_BLOCKS 1
#endif
#define D 128
#define BC 64
#define BR (64 * WGS)
#define THREADS (128 * WGS)
#define Q_BLOCK (BR * 128)  // bytes of one 64-wide column block of the Q tile
#define T_BLOCK (BC * 128)  // ... of a K or V tile
#define TILE (2 * T_BLOCK)  // a K or V tile: two column blocks
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define NEG_INF (-__int_as_float(0x7f800000))

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASH_SM90A 1
#endif

// load_tile, store_o and the wgmma shapes wgmma_qk (S += Q K^T, both K-major in shared
// memory) and wgmma_pv (O += P V, P in registers, V read transposed), shared with
// kernels 5 and 6
#include "12-flash-attention/flash_wgmma.cuh"

#ifdef FLASH_SM90A
__device__ __forceinline__ void wgmma_commit_and_wait() {
    wgmma_commit();
    wgmma_wait<0>();
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
flash_attn_4_wgmma(int S, float scale, int causal, const __half* __restrict__ Q,
                   const __half* __restrict__ K, const __half* __restrict__ V,
                   __half* __restrict__ O, float* __restrict__ L) {
#ifdef FLASH_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned qs = (smem_addr(smem) + 1023) & ~1023u;  // swizzle atoms: 1 KiB
    const unsigned tiles = qs + 2 * Q_BLOCK;  // [slot][K, V]
    const int wg = threadIdx.x / 128, w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // the longest causal rows first
    const int wq = q0 + 64 * wg;  // the warpgroup's first row
    const int rq = wq + 16 * w + g;  // this thread's rows: rq, rq + 8
    const size_t head = (size_t)blockIdx.y * S * D;
    const __half* Kh = K + head;
    const __half* Vh = V + head;
    const int last = causal ? min(q0 + BR, S) - 1 : S - 1;
    const int tiles_n = last / BC + 1;

    load_tile(qs, Q + head, q0, BR, S);
    load_tile(tiles, Kh, 0, BC, S);
    load_tile(tiles + TILE, Vh, 0, BC, S);
    asm volatile("cp.async.commit_group;\n" ::);

    const float scale2 = scale * LOG2E;  // exp(scale s) = exp2(scale2 s)
    float o[D / 2] = {};  // 64 x 128 per warpgroup: [8-column tile dt][4]
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};  // rows rq, rq + 8 (log2 units)
    for (int j = 0; j < tiles_n; j++) {
        if (j + 1 < tiles_n) {
            const unsigned next = tiles + ((j + 1) % 2) * 2 * TILE;
            load_tile(next, Kh, (j + 1) * BC, BC, S);
            load_tile(next + TILE, Vh, (j + 1) * BC, BC, S);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        // the copies wrote through the generic proxy; wgmma reads through the async one
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const unsigned ks = tiles + (j % 2) * 2 * TILE, vs = ks + TILE;
        const int n0 = j * BC;
        if (!causal || n0 <= wq + 63) {  // else every key is above this warpgroup's rows
            float s[BC / 2];  // 64 x 64 scores per warpgroup: [8-key tile nt][4]
#pragma unroll
            for (int i = 0; i < BC / 2; i++) s[i] = 0.f;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)  // k16 step: 32 bytes on, or next block
                wgmma_qk(s, desc(qs + (kk / 4) * Q_BLOCK + wg * 64 * 128 + (kk % 4) * 32,
                                 16, 1024),
                         desc(ks + (kk / 4) * T_BLOCK + (kk % 4) * 32, 16, 1024));
            wgmma_commit_and_wait();
            const bool edge = n0 + BC > S || (causal && n0 + BC - 1 > wq);
            float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
            for (int i = 0; i < BC / 2; i++) {
                float v = s[i] * scale2;
                const int e = i % 4;
                if (edge) {
                    const int key = n0 + 8 * (i / 4) + 2 * t + (e & 1);
                    if (key >= S || (causal && key > rq + 8 * (e / 2))) v = NEG_INF;
                }
                s[i] = v;
                mx[e / 2] = fmaxf(mx[e / 2], v);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
                const float m_new = fmaxf(m[h], mx[h]);
                const float base = m_new == NEG_INF ? 0.f : m_new;
                const float alpha = exp2f(m[h] - base);
                m[h] = m_new;
                l[h] *= alpha;
#pragma unroll
                for (int dt = 0; dt < D / 8; dt++) {
                    o[4 * dt + 2 * h] *= alpha;
                    o[4 * dt + 2 * h + 1] *= alpha;
                }
#pragma unroll
                for (int nt = 0; nt < BC / 8; nt++) {
                    const float p0 = exp2f(s[4 * nt + 2 * h] - base);
                    const float p1 = exp2f(s[4 * nt + 2 * h + 1] - base);
                    s[4 * nt + 2 * h] = p0;
                    s[4 * nt + 2 * h + 1] = p1;
                    l[h] += p0 + p1;
                }
            }
            unsigned a[BC / 16][4];  // P as A fragments: key tiles 2 kk, 2 kk + 1
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    a[kk][r] = pack_half2(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)  // 16 keys: 16 rows of 128 bytes further
                wgmma_pv(o, a[kk], desc(vs + kk * 16 * 128, T_BLOCK, 1024));
            wgmma_commit_and_wait();
        }
        __syncthreads();  // the slot is refilled at the next step
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // only empty groups are left
    store_o(o, l, m, rq, t, S, O + head, L + (size_t)blockIdx.y * S);
#endif
}
