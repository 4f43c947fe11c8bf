// flash_attn_6_ws: kernel 5's FlashAttention forward (sm_90a; Q, K, V, O [BH, S, 128]
// __half, L [BH, S] float logsumexp, any S, causal) with FlashAttention-3's warp
// specialisation (Shah et al. 2024). Warpgroup 0 is a producer: one of its threads asks
// the Tensor Memory Accelerator (TMA) for each work tile's Q and for each K and V tile
// (cp.async.bulk.tensor, swizzled by the copy engine as wgmma reads it) into a ring of
// STAGES slots, and mbarriers carry the hand-offs: a "full" barrier per slot completes
// when the tile's bytes have landed, an "empty" one when both consumers are done with it.
// K and V have barriers of their own, so S = Q K^T starts before V has arrived and K's
// slot is refilled as soon as the scores are computed. The producer gives its registers
// away (setmaxnreg: PRODUCER_REGS) to the two consumer warpgroups (CONSUMER_REGS), which
// run kernel 5's step: issue S_j = Q K_j and O += P_(j-1) V_(j-1), wait for the first,
// softmax of S_j while P V runs; P_j becomes fp16 A fragments only once P V has read
// P_(j-1), in the same registers (as FlashAttention-3 does: no second copy of P).
// No thread of the block waits at a block-wide barrier after the setup.
// PINGPONG: the consumers take turns to issue their products (two named barriers), so
// that one warpgroup's softmax runs while the other's products keep the Tensor Cores
// busy.
// The tensor maps (cudl.tma, box of 64 columns x BR or BC rows, 128-byte swizzle) view
// Q, K and V as [BH S, 128]: rows of a tile past S belong to the next head (or lie past
// the end and read as 0); their keys are masked and their query rows not written.
// Compile with -arch=sm_90a (elsewhere the kernel is empty), -DBC (64, 128, 176, 192),
// -DSTAGES (2), -DPINGPONG (0/1), -DQK_WIDE (1), -DPRODUCER_REGS (24),
// -DCONSUMER_REGS (240).
// Launch: block 384, grid BH ceil(S / 128) (one work tile per block) or fewer (each
// block loops over tiles), dynamic shared memory (128 + 2 STAGES BC) * 256 + 1024 + 256
// bytes (at most 227 KiB: STAGES 3 with BC 128, 2 above). Head dimension 128 only.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // wgmma, mbarrier, TMA, setmaxnreg wrappers

#ifndef BC
#define BC 128
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef PINGPONG
#define PINGPONG 1
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 24
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 240
#endif
// QK_WIDE: S = Q K^T with one m64nBCk16 wgmma per k16 step (0: BC / 64 of m64n64k16)
#ifndef QK_WIDE
#define QK_WIDE 1
#endif
#define D 128
#define CONSUMERS 2  // consumer warpgroups, 64 query rows each
#define BR (64 * CONSUMERS)
#define THREADS (128 * (CONSUMERS + 1))
#define Q_BLOCK (BR * 128)  // bytes of one 64-wide column block of the Q tile
#define T_BLOCK (BC * 128)  // ... of a K or V tile
#define TILE (2 * T_BLOCK)  // a K or V tile: two column blocks
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define NEG_INF (-__int_as_float(0x7f800000))

static_assert(BC % 64 == 0 || BC == 176, "BC: 64, 128, 192 or 176 keys per tile");

// issue_qk, issue_pv, softmax_tile, fence_regs and store_o, shared with kernels 4 and 5
#include "12-flash-attention/flash_wgmma.cuh"

#ifdef TC_SM90A
// Ping-pong: consumer c issues its products between bar_sync on barrier 1 + c (its
// turn) and bar_arrive on the other's barrier (the other's turn next).
__device__ __forceinline__ void turn_begin(int c) {
    if (PINGPONG) bar_sync(1 + c, 256);
}
__device__ __forceinline__ void turn_end(int c) {
    if (PINGPONG) bar_arrive(2 - c, 256);
}
// Consumer 0 ends with one turn more, which consumer 1's last hand-off completes. It is a
// predicated bar.sync, not an if: ptxas, seeing a branch there, serializes the wgmma
// of the whole kernel (its warning C7513), as it does for a C++ loop around try_wait.
__device__ __forceinline__ void last_turn(int c) {
    if (PINGPONG)
        asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, %0, 0;\n@p bar.sync 1, 256;\n}\n"
                     :: "r"(c) : "memory");
}

// The same register fence as fence_regs for P's A fragments.
__device__ __forceinline__ void fence_p(unsigned (*p)[4]) {
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) asm volatile("" : "+r"(p[kk][r])::"memory");
}
#endif

// map_q: box BR rows x 64 columns; map_k, map_v: BC rows x 64 columns (cudl.tma).
// Work tiles (BH ceil(S / BR) of them: BR query rows of one head) in launch order: with
// a causal mask every head's longest rows first, else head by head (the blocks running
// at once then share the K and V of a few heads in L2). Block b takes tiles b,
// b + gridDim.x, ...: one tile per block (a grid of all tiles), or, with a grid of one
// block per SM (-DPERSISTENT, which only tells the launcher; it keeps one tile per block
// with a causal mask, whose tiles a fixed order would share out unevenly), a loop in
// which the loads of the next tile overlap the end of the current one.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
flash_attn_6_ws(int S, float scale, int causal,
                const unsigned long long* __restrict__ map_q,
                const unsigned long long* __restrict__ map_k,
                const unsigned long long* __restrict__ map_v, __half* __restrict__ O,
                float* __restrict__ L, int BH) {
#ifdef TC_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned qs = (smem_addr(smem) + 1023) & ~1023u;  // swizzle atoms: 1 KiB
    const unsigned tiles = qs + 2 * Q_BLOCK;  // [slot][K, V]
    const unsigned q_full = tiles + STAGES * 2 * TILE, q_empty = q_full + 8;
    auto k_full = [&](int s) { return q_full + 16 + 8 * s; };  // 4 barriers per slot
    auto v_full = [&](int s) { return q_full + 16 + 8 * (STAGES + s); };
    auto k_empty = [&](int s) { return q_full + 16 + 8 * (2 * STAGES + s); };
    auto v_empty = [&](int s) { return q_full + 16 + 8 * (3 * STAGES + s); };
    // the K tile of ring index i (its V tile follows)
    auto k_slot = [&](int i) { return tiles + (i % STAGES) * 2 * TILE; };
    const int wg = threadIdx.x / 128, w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int row_blocks = (S + BR - 1) / BR, work = row_blocks * BH;
    // work tile -> its first query row, its head's first row in the [BH S, 128] maps, and
    // the number of key tiles it reads
    auto decode = [&](int tile, int& q0, int& row0, int& tiles_n) {
        q0 = (causal ? row_blocks - 1 - tile / BH : tile % row_blocks) * BR;
        row0 = (causal ? tile % BH : tile / row_blocks) * S;
        tiles_n = ((causal ? min(q0 + BR, S) : S) - 1) / BC + 1;
    };

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, 4 * CONSUMERS);  // one arrive per consumer warp
        for (int s = 0; s < STAGES; s++) {
            mbar_init(k_full(s), 1);  // the producer's arrive (+ the TMA bytes)
            mbar_init(v_full(s), 1);
            mbar_init(k_empty(s), 4 * CONSUMERS);
            mbar_init(v_empty(s), 4 * CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the last block-wide barrier

    if (wg == 0) {  // producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int i = 0;  // K/V tiles loaded so far: ring slot i % STAGES, round i / STAGES
            for (int tile = blockIdx.x, n = 0; tile < work; tile += gridDim.x, n++) {
                int q0, row0, tiles_n;
                decode(tile, q0, row0, tiles_n);
                if (n > 0)  // the last tile's Q is read
                    mbar_wait_asm(q_empty, (n - 1) & 1);
                mbar_expect(q_full, 2 * Q_BLOCK);
                for (int cb = 0; cb < 2; cb++)  // two 64-column blocks
                    tma_load(qs + cb * Q_BLOCK, map_q, 64 * cb, row0 + q0, q_full);
                for (int j = 0; j < tiles_n; j++, i++) {
                    const int s = i % STAGES, round = i / STAGES;
                    const unsigned ks = k_slot(i), vs = ks + TILE;
                    if (round > 0) mbar_wait_asm(k_empty(s), (round - 1) & 1);
                    mbar_expect(k_full(s), TILE);
                    for (int cb = 0; cb < 2; cb++)
                        tma_load(ks + cb * T_BLOCK, map_k, 64 * cb, row0 + j * BC,
                                 k_full(s));
                    if (round > 0) mbar_wait_asm(v_empty(s), (round - 1) & 1);
                    mbar_expect(v_full(s), TILE);
                    for (int cb = 0; cb < 2; cb++)
                        tma_load(vs + cb * T_BLOCK, map_v, 64 * cb, row0 + j * BC,
                                 v_full(s));
                }
            }
        }
        return;
    }
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;  // consumer 0 or 1: query rows q0 + 64 c ... of each tile
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    auto release = [&](unsigned bar) {  // this warp is done with a slot
        if (lane == 0) mbar_arrive(bar);
    };
    auto k_ready = [&](int i) { mbar_wait_asm(k_full(i % STAGES), (i / STAGES) & 1); };
    auto v_ready = [&](int i) { mbar_wait_asm(v_full(i % STAGES), (i / STAGES) & 1); };
    const float scale2 = scale * LOG2E;  // exp(scale s) = exp2(scale2 s)
    if (PINGPONG && c == 1) bar_arrive(1, 256);  // consumer 0 takes the first turn

    int i = 0;  // ring index of the work tile's first K/V tile
    for (int tile = blockIdx.x, n = 0; tile < work; tile += gridDim.x, n++) {
        int q0, row0, tiles_n;
        decode(tile, q0, row0, tiles_n);
        const int rq = q0 + 64 * c + 16 * w + g;  // this thread's rows: rq, rq + 8
        float o[D / 2];  // 64 x 128 per warpgroup: [8-column tile dt][4]
#pragma unroll
        for (int e = 0; e < D / 2; e++) o[e] = 0.f;
        float s[BC / 2];  // 64 x BC scores per warpgroup: [8-key tile nt][4]
        float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f}, alpha[2];
        unsigned p[BC / 16][4];  // P of the tile whose P V is pending, as A fragments

        mbar_wait_asm(q_full, n & 1);
        k_ready(i);
        turn_begin(c);
        issue_qk(s, qs, k_slot(i), c);
        turn_end(c);
        wgmma_wait<0>();
        fence_regs<BC / 2>(s);
        release(k_empty(i % STAGES));
        softmax_tile(s, m, l, alpha, p, 0, S, causal, rq, t, scale2);
        for (int j = 1; j < tiles_n; j++) {
            k_ready(i + j);
            v_ready(i + j - 1);
            // o's rescaling and p's writes are done before the fence
            fence_regs<D / 2>(o);
            fence_p(p);
            turn_begin(c);
            issue_qk(s, qs, k_slot(i + j), c);
            issue_pv(o, p, k_slot(i + j - 1) + TILE);
            turn_end(c);
            wgmma_wait<1>();  // S_j is ready, P V may still run
            fence_regs<BC / 2>(s);
            release(k_empty((i + j) % STAGES));
            // P stays in s
            softmax_rows(s, m, l, alpha, j * BC, S, causal, rq, t, scale2);
            wgmma_wait<0>();
            fence_regs<D / 2>(o);
            fence_p(p);  // P V has read p: now it may be replaced
            release(v_empty((i + j - 1) % STAGES));
            pack_p(s, p);
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++) {
                o[4 * dt] *= alpha[0];
                o[4 * dt + 1] *= alpha[0];
                o[4 * dt + 2] *= alpha[1];
                o[4 * dt + 3] *= alpha[1];
            }
        }
        release(q_empty);  // every Q K^T of the tile is done: the next Q may land
        i += tiles_n;
        v_ready(i - 1);
        fence_regs<D / 2>(o);
        fence_p(p);
        turn_begin(c);
        issue_pv(o, p, k_slot(i - 1) + TILE);
        turn_end(c);
        wgmma_wait<0>();
        fence_regs<D / 2>(o);
        release(v_empty((i - 1) % STAGES));
        store_o(o, l, m, rq, t, S, O + (size_t)row0 * D, L + row0);
    }
    last_turn(c);
#endif
}
