// hgemm_3_cp_async: hgemm_2_mma_ldmatrix (mma.sync + ldmatrix from XOR-swizzled shared
// memory, a 128 x BN tile per block of 2 x WARPS_N warps, each warp 64 x BN / WARPS_N;
// __half in, float out, fp32 accumulate, row-major A M x K, B K x N, C M x N) with a
// STAGES-deep pipeline of asynchronous copies. cp.async (sm_80+) moves 16 bytes from
// global to shared memory without passing through registers; the copies of one K step
// form a commit_group. While the warps multiply the tiles of step k, the copies of steps
// k + 1 ... k + STAGES - 1 are in flight; wait_group STAGES - 2 retires the oldest group
// only, then one barrier makes its tile visible to the block and frees the slot read in
// the previous step.
// sm_75 (T4): m16n8k8 and plain 16-byte copies in the same slot order (the pipeline then
// hides nothing; define HGEMM_SM75 to force that path on any GPU, e.g. in a test).
// -DHGEMM_BF16: A and B in bf16 (sm_80+ only), as in hgemm_2.
// The ring lives in dynamic shared memory (STAGES x (128 + BN) x BK halves), so -DBN=256
// (warp tile 64 x 64: twice the reuse of each A fragment) and -DSTAGES=4 fit too.
// -DFRAG_DBUF: the fragments are double-buffered in registers: each warp loads the next
// k16 slice with ldmatrix (the next step's first slice across a step boundary) before
// it issues the mma of this one, so the Tensor Cores do not wait for ldmatrix or the
// barrier. -DGROUP_M=8: blocks walk C in bands of 8 tile rows (L2 reuse, as kernel 5).
// -DWARPS_N=2 with BN=128: 4 warps of 64 x 64 per block, so two blocks share an SM.
// Limit: mma.sync's register-fed operands and a plain epilogue: the chapter's target is
// 60% of cuBLAS at 4096^3 on the H100 (cuBLAS adds wgmma and TMA).
// Launch: block THREADS (64 WARPS_N, default 256), grid (N / BN, M / 128),
// shared_mem = STAGES * (128 + BN) * BK * 2.
// Requires M a multiple of 128, N of BN, K of BK (no bounds checks); 16-byte alignment.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers
#ifdef HGEMM_BF16  // A and B in bf16 (sm_80+): the same tiles, fragments and copies
#include <cuda_bf16.h>
typedef __nv_bfloat16 in_t;
#else
typedef __half in_t;  // A and B in fp16
#endif

#define BM 128
#ifndef BN
#define BN 128  // 128 or 256
#endif
#ifndef BK
#define BK 32  // 32 or 64 (one barrier per 64 of K: half as many)
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef GROUP_M
#define GROUP_M 0
#endif
#ifndef MIN_BLOCKS  // blocks per SM whose registers must fit (__launch_bounds__)
#if BN == 128 && !defined(FRAG_DBUF)
#define MIN_BLOCKS 2  // 128 x 128 fits in 128 registers: two blocks share an SM
#else
#define MIN_BLOCKS 1  // up to 255 registers: 64 x 64 warp tiles need ~230
#endif
#endif
#ifndef WARPS_N
#define WARPS_N 4  // warps across the tile (2 down)
#endif
#define THREADS (64 * WARPS_N)
#define WN (BN / WARPS_N)  // the warp tile is 64 x WN: WN / 8 mma tiles across
#define KS (BK / 16)  // k16 slices per K step

#if __CUDA_ARCH__ >= 800 && !defined(HGEMM_SM75)
#define HGEMM_SM80 1
#endif

// Offsets (in halves) of element (r, k) of an A tile and (k, n) of a B tile (16-byte
// chunks XOR-swizzled against bank conflicts of ldmatrix, as in hgemm_2).
__device__ __forceinline__ int a_off(int r, int k) {
#if BK == 64  // 128-byte rows: chunk c of row r at c ^ (r % 8)
    return r * BK + ((((k >> 3) ^ r) & 7) << 3) + (k & 7);
#else
    return r * BK + ((((k >> 3) ^ (r >> 1)) & 3) << 3) + (k & 7);
#endif
}
__device__ __forceinline__ int b_off(int k, int n) {
    return k * BN + ((((n >> 3) ^ k) & 7) | ((n >> 3) & ~7)) * 8 + (n & 7);
}

// cp.async groups: commit closes this thread's copies issued so far, wait_oldest
// leaves at most STAGES - 2 groups in flight.
__device__ __forceinline__ void commit() { cp_async_commit(); }
__device__ __forceinline__ void wait_oldest() { cp_async_wait<STAGES - 2>(); }

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
hgemm_3_cp_async(int M, int N, int K, const in_t* __restrict__ A,
                 const in_t* __restrict__ B, float* __restrict__ C) {
    extern __shared__ __align__(128) in_t smem[];
    in_t* As = smem;                     // STAGES tiles of BM x BK
    in_t* Bs = smem + STAGES * BM * BK;  // STAGES tiles of BK x BN
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * 64, wn = (warp % WARPS_N) * WN;  // its 64 x WN
#if GROUP_M > 0  // block t takes tile (tm, tn): column by column within a band of rows
    const int t = blockIdx.y * gridDim.x + blockIdx.x, band = GROUP_M * gridDim.x;
    const int first = t / band * GROUP_M, rows = min((int)gridDim.y - first, GROUP_M);
    const int row0 = (first + t % band % rows) * BM, col0 = t % band / rows * BN;
#else
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
#endif
    const int steps = K / BK;
    float acc[4][WN / 8][4] = {};

    // this thread's 16-byte chunks: A rows ra + RA i at column ka, B rows kb + RB i at
    // column nb (in loops of constant trip count, which unroll)
    const int ra = tid / (BK / 8), ka = tid % (BK / 8) * 8, RA = THREADS / (BK / 8);
    const int kb = tid / (BN / 8), nb = tid % (BN / 8) * 8, RB = THREADS / (BN / 8);
    auto load = [&](int step) {  // the copies of K step `step` into slot step % STAGES
        const int s = step % STAGES, k0 = step * BK;
#pragma unroll
        for (int i = 0; i < BM / RA; i++) {
            int r = ra + RA * i;
            copy16(&As[s * BM * BK + a_off(r, ka)], &A[(size_t)(row0 + r) * K + k0 + ka]);
        }
#pragma unroll
        for (int i = 0; i < BK / RB; i++) {
            int k = kb + RB * i;
            copy16(&Bs[s * BK * BN + b_off(k, nb)], &B[(size_t)(k0 + k) * N + col0 + nb]);
        }
    };
    // Each lane's ldmatrix addresses, computed once (bytes in the shared window) for
    // slice 0 of slot 0: A row wm + lane % 16 at k = 8 (lane / 16) (lanes 16-31 give the
    // k + 8 half), B row lane % 16. A slot or a block of 16 rows adds a constant. Slice
    // kk of B is 16 kk rows further; slice kk of A is chunk 2 kk + c (c = lane / 16) of
    // the same row, stored by the swizzle at (2 kk + c) ^ x = 2 kk ^ (c ^ x): at the
    // address of slice 0 XOR 32 kk bytes. Fewer registers than an address per slice.
    const unsigned a0 = smem_addr(&As[a_off(wm + lane % 16, (lane / 16) * 8)]);
    unsigned b0[WN / 16];
#pragma unroll
    for (int j = 0; j < WN / 8; j += 2)
        b0[j / 2] = smem_addr(&Bs[b_off(lane % 16, wn + 8 * j + (lane / 16) * 8)]);
    // the warp's fragments of k16 slice `kk` of slot `s`: A 64 x 16, B 16 x WN
    auto fragments = [&](int s, int kk, unsigned (&a)[4][4], unsigned (&b)[WN / 8][2]) {
#pragma unroll
        for (int i = 0; i < 4; i++) {  // rows 16 i further: 16 i BK halves
            unsigned p = (a0 + 2 * (s * BM * BK + 16 * i * BK)) ^ (32 * kk);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                         "{%0,%1,%2,%3}, [%4];\n"
                         : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                         : "r"(p));
        }
#pragma unroll
        for (int j = 0; j < WN / 8; j += 2) {  // two 8-wide column tiles per x4
            unsigned p = b0[j / 2] + 2 * (s * BK * BN + 16 * kk * BN);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                         "{%0,%1,%2,%3}, [%4];\n"
                         : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]),
                           "=r"(b[j + 1][1])
                         : "r"(p));
        }
    };
    auto multiply = [&](const unsigned (&a)[4][4], const unsigned (&b)[WN / 8][2]) {
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < WN / 8; j++) mma_16x8x16_in(acc[i][j], a[i], b[j]);
    };

    for (int step = 0; step < STAGES - 1; step++) {  // prologue: STAGES - 1 groups
        if (step < steps) load(step);
        commit();  // an empty group keeps the count of groups in step with the K steps
    }
#ifndef FRAG_DBUF
    unsigned a[4][4], b[WN / 8][2];
    for (int step = 0; step < steps; step++) {
        wait_oldest();    // this thread's copies of `step` have landed
        __syncthreads();  // everyone's have; and slot (step - 1) % STAGES is free again
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        commit();
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            fragments(step % STAGES, kk, a, b);
            multiply(a, b);  // waits for the ldmatrix just issued
        }
    }
#else  // fragments of slice kk + 1 load into one buffer while slice kk multiplies
    unsigned a[2][4][4], b[2][WN / 8][2];
    wait_oldest();  // step 0 has landed
    __syncthreads();
    fragments(0, 0, a[0], b[0]);
    for (int step = 0; step < steps; step++) {
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            if (kk == 0) {  // the slot of step - 1 was freed at the last barrier
                if (step + STAGES - 1 < steps) load(step + STAGES - 1);
                commit();
            }
            if (kk < KS - 1) {
                fragments(step % STAGES, kk + 1, a[(kk + 1) % 2], b[(kk + 1) % 2]);
            } else {  // step + 1 landed and visible; every warp is done reading `step`
                wait_oldest();
                __syncthreads();
                if (step + 1 < steps)
                    fragments((step + 1) % STAGES, 0, a[(kk + 1) % 2], b[(kk + 1) % 2]);
            }
            multiply(a[kk % 2], b[kk % 2]);  // its operands were loaded a slice ago
        }
    }
#endif
#ifdef HGEMM_SM80
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // only empty groups are left
#endif
    // accumulator layout: rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile
    const int g = lane / 4, t4 = lane % 4;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < WN / 8; j++) {
            size_t r = row0 + wm + 16 * i + g, n = col0 + wn + 8 * j + 2 * t4;
            *reinterpret_cast<float2*>(&C[r * N + n]) =
                make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(&C[(r + 8) * N + n]) =
                make_float2(acc[i][j][2], acc[i][j][3]);
        }
}
