// flash_attn_5_overlap: flash_attn_4_wgmma (FlashAttention-2 forward on wgmma, sm_90a;
// Q, K, V, O [BH, S, 128] __half, L [BH, S] float logsumexp, any S, causal) with the
// softmax of one tile overlapping the Tensor Core work of its neighbours inside each
// warpgroup, as FlashAttention-3 does: at step j a warpgroup issues S_j = Q K_j and
// O += P_(j-1) V_(j-1) as two asynchronous wgmma groups, waits for the first only,
// computes the softmax of S_j while P V runs, then waits for P V and rescales O by
// exp(m_(j-1) - m_j) (P_(j-1) was taken against m_(j-1)). P V of a tile thus runs one
// step late, so three K/V slots rotate (tile j + 1 is in flight meanwhile) and one
// barrier per step suffices. Register fences after each wait keep the compiler from
// reading accumulators before wgmma has written them. Causal blocks stop at the tile of
// their last row (a warpgroup may spend a fully masked tile: its P is 0); blocks start
// from the longest rows.
// Limit: no producer warp (all warps issue the copies), no ping-pong ordering between
// warpgroups, no TMA: the chapter's target for its best kernel is 80% of PyTorch's SDPA
// on the H100 at d = 128.
// Compile with -arch=sm_90a (elsewhere the kernel is empty), -DWGS (3), -DBC (64 or 128
// keys per tile: 128 issues two m64n64 wgmma per k step), -DMIN_BLOCKS (1).
// Launch: block 128 * WGS, grid (ceil(S / (64 WGS)), BH), dynamic shared memory
// (64 WGS + 6 BC) * 256 + 1024 bytes. Head dimension 128 only; Q, K, V 16-byte aligned.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers

#ifndef WGS
#define WGS 3
#endif
#define SLOTS 3  // K/V tiles in shared memory: tile j (S), j - 1 (P V), j + 1 (in flight)
#ifndef MIN_BLOCKS  // blocks per SM that the registers must allow (__launch_bounds__)
#define MIN_BLOCKS 1
#endif
#ifndef BC
#define BC 64
#endif
#define D 128
#define BR (64 * WGS)
#define THREADS (128 * WGS)
#define Q_BLOCK (BR * 128)  // bytes of one 64-wide column block of the Q tile
#define T_BLOCK (BC * 128)  // ... of a K or V tile
#define TILE (2 * T_BLOCK)  // a K or V tile: two column blocks
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define NEG_INF (-__int_as_float(0x7f800000))

static_assert(BC == 64 || BC == 128, "BC");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASH_SM90A 1
#endif

// load_tile, issue_qk, issue_pv, softmax_tile, fence_regs and store_o, shared with
// kernels 4 and 6
#include "12-flash-attention/flash_wgmma.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
flash_attn_5_overlap(int S, float scale, int causal, const __half* __restrict__ Q,
                     const __half* __restrict__ K, const __half* __restrict__ V,
                     __half* __restrict__ O, float* __restrict__ L) {
#ifdef FLASH_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned qs = (smem_addr(smem) + 1023) & ~1023u;  // swizzle atoms: 1 KiB
    const unsigned tiles = qs + 2 * Q_BLOCK;  // [slot][K, V]
    const int wg = threadIdx.x / 128, w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // the longest causal rows first
    const int rq = q0 + 64 * wg + 16 * w + g;  // this thread's rows: rq, rq + 8
    const size_t head = (size_t)blockIdx.y * S * D;
    const __half* Kh = K + head;
    const __half* Vh = V + head;
    const int last = causal ? min(q0 + BR, S) - 1 : S - 1;
    const int tiles_n = last / BC + 1;
    auto k_slot = [&](int j) { return tiles + (j % SLOTS) * 2 * TILE; };

    load_tile(qs, Q + head, q0, BR, S);
    load_tile(k_slot(0), Kh, 0, BC, S);
    load_tile(k_slot(0) + TILE, Vh, 0, BC, S);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (tiles_n > 1) {
        load_tile(k_slot(1), Kh, BC, BC, S);
        load_tile(k_slot(1) + TILE, Vh, BC, BC, S);
    }
    asm volatile("cp.async.commit_group;\n" ::);

    const float scale2 = scale * LOG2E;  // exp(scale s) = exp2(scale2 s)
    float o[D / 2] = {};  // 64 x 128 per warpgroup: [8-column tile dt][4]
    float s[BC / 2];  // 64 x BC scores per warpgroup: [8-key tile nt][4]
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f}, alpha[2];
    unsigned p[BC / 16][4], p_next[BC / 16][4];  // P of the tile whose P V is pending
    issue_qk(s, qs, k_slot(0), wg);
    wgmma_wait<0>();
    fence_regs<BC / 2>(s);
    softmax_tile(s, m, l, alpha, p, 0, S, causal, rq, t, scale2);
    for (int j = 1; j < tiles_n; j++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // tile j has landed
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // for all threads; and every P V of step j - 2 is done
        if (j + 1 < tiles_n) {  // into the slot of tile j - 2
            load_tile(k_slot(j + 1), Kh, (j + 1) * BC, BC, S);
            load_tile(k_slot(j + 1) + TILE, Vh, (j + 1) * BC, BC, S);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        issue_qk(s, qs, k_slot(j), wg);
        issue_pv(o, p, k_slot(j - 1) + TILE);
        wgmma_wait<1>();  // S_j is ready, P V may still run
        fence_regs<BC / 2>(s);
        softmax_tile(s, m, l, alpha, p_next, j * BC, S, causal, rq, t, scale2);
        wgmma_wait<0>();
        fence_regs<D / 2>(o);
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)  // P V has read p: now it may be replaced
#pragma unroll
            for (int r = 0; r < 4; r++) {
                asm volatile("" : "+r"(p[kk][r])::"memory");
                p[kk][r] = p_next[kk][r];
            }
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            o[4 * dt] *= alpha[0];
            o[4 * dt + 1] *= alpha[0];
            o[4 * dt + 2] *= alpha[1];
            o[4 * dt + 3] *= alpha[1];
        }
    }
    issue_pv(o, p, k_slot(tiles_n - 1) + TILE);
    wgmma_wait<0>();
    fence_regs<D / 2>(o);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    store_o(o, l, m, rq, t, S, O + head, L + (size_t)blockIdx.y * S);
#endif
}
