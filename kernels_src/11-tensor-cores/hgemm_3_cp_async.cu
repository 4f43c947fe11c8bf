// hgemm_3_cp_async: hgemm_2_mma_ldmatrix (mma.sync + ldmatrix from XOR-swizzled shared
// memory, a 128 x BN tile per block of 8 warps, each warp 64 x BN / 4; __half in, float
// out, fp32 accumulate, row-major A M x K, B K x N, C M x N) with a STAGES-deep pipeline
// of asynchronous copies. cp.async (sm_80+) moves 16 bytes from global to shared memory
// without passing through registers; the copies of one K step form a commit_group. While
// the warps multiply the tiles of step k, the copies of steps k + 1 ... k + STAGES - 1
// are in flight; wait_group STAGES - 2 retires the oldest group only, then one barrier
// makes its tile visible to the block and frees the slot read in the previous step.
// sm_75 (T4): m16n8k8 and plain 16-byte copies in the same slot order (the pipeline then
// hides nothing; define HGEMM_SM75 to force that path on any GPU, e.g. in a test).
// -DHGEMM_BF16: A and B in bf16 (sm_80+ only), as in hgemm_2.
// The ring lives in dynamic shared memory (STAGES x (128 + BN) x 32 halves), so -DBN=256
// (warp tile 64 x 64: twice the reuse of each A fragment) and -DSTAGES=4 fit too.
// Limit: one barrier per K step, a plain epilogue and mma.sync's register-fed operands:
// the chapter's target is 60% of cuBLAS at 4096^3 on the H100 (cuBLAS adds wgmma and
// TMA).
// Launch: block 256, grid (N / BN, M / 128), shared_mem = STAGES * (128 + BN) * BK * 2.
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
#define WN (BN / 4)  // the warp tile is 64 x WN: WN / 8 mma tiles across

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

extern "C" __global__ void __launch_bounds__(256)
hgemm_3_cp_async(int M, int N, int K, const in_t* __restrict__ A,
                 const in_t* __restrict__ B, float* __restrict__ C) {
    extern __shared__ __align__(128) in_t smem[];
    in_t* As = smem;                     // STAGES tiles of BM x BK
    in_t* Bs = smem + STAGES * BM * BK;  // STAGES tiles of BK x BN
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * WN;  // the warp's 64 x WN tile
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int steps = K / BK;
    float acc[4][WN / 8][4] = {};

    // issue the copies of K step `step` into slot step % STAGES (16-byte chunks)
    auto load = [&](int step) {
        const int s = step % STAGES, k0 = step * BK;
        for (int c = tid; c < BM * BK / 8; c += 256) {
            int r = c / (BK / 8), k = (c % (BK / 8)) * 8;
            copy16(&As[s * BM * BK + a_off(r, k)], &A[(size_t)(row0 + r) * K + k0 + k]);
        }
        for (int c = tid; c < BK * BN / 8; c += 256) {
            int kb = c / (BN / 8), n = (c % (BN / 8)) * 8;
            copy16(&Bs[s * BK * BN + b_off(kb, n)], &B[(size_t)(k0 + kb) * N + col0 + n]);
        }
    };
    for (int step = 0; step < STAGES - 1; step++) {  // prologue: STAGES - 1 groups
        if (step < steps) load(step);
        commit();  // an empty group keeps the count of groups in step with the K steps
    }
    for (int step = 0; step < steps; step++) {
        wait_oldest();    // this thread's copies of `step` have landed
        __syncthreads();  // everyone's have; and slot (step - 1) % STAGES is free again
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        commit();
        const in_t* as = As + (step % STAGES) * BM * BK;
        const in_t* bs = Bs + (step % STAGES) * BK * BN;
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[4][4], b[WN / 8][2];
            for (int i = 0; i < 4; i++) {  // lanes 0-15: rows at k, lanes 16-31: at k + 8
                int r = wm + 16 * i + lane % 16, k = kk + (lane / 16) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem_addr(&as[a_off(r, k)])));
            }
            // two 8-wide column tiles per ldmatrix.x4
            for (int j = 0; j < WN / 8; j += 2) {
                int k = kk + lane % 16, n = wn + 8 * j + (lane / 16) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]),
                               "=r"(b[j + 1][1])
                             : "r"(smem_addr(&bs[b_off(k, n)])));
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < WN / 8; j++) mma_16x8x16_in(acc[i][j], a[i], b[j]);
        }
    }
#ifdef HGEMM_SM80
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // only empty groups are left
#endif
    // accumulator layout: rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < WN / 8; j++) {
            size_t r = row0 + wm + 16 * i + g, n = col0 + wn + 8 * j + 2 * t;
            *reinterpret_cast<float2*>(&C[r * N + n]) =
                make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(&C[(r + 8) * N + n]) =
                make_float2(acc[i][j][2], acc[i][j][3]);
        }
}
