// hgemm_4_wgmma: C = A B on Hopper's warpgroup Tensor Core instruction wgmma.mma_async
// (sm_90a only). A is M x K, B is K x N, C is M x N, row-major; __half in, float out,
// fp32 accumulate. One wgmma is issued by a warpgroup (4 warps, 128 threads) and
// multiplies a 64 x 256 x 16 product straight from shared memory: the operands are never
// loaded into registers, only the fp32 accumulators live there (128 per thread). Shared
// tiles use the 128-byte swizzle the hardware reads: 16-byte chunk c of each 128-byte row
// r sits at c ^ (r % 8), in 1024-byte atoms of 8 rows; a 64-bit descriptor tells wgmma
// where a tile starts, the stride between atoms (SBO) and between 64-wide column blocks
// (LBO). Two kernels share the helpers:
//  hgemm_4_wgmma      all 256 threads (2 warpgroups, each 64 x 256 of a 128 x 256 tile)
//                     copy tiles with cp.async into a STAGES-deep ring, as in hgemm_3.
//  hgemm_5_wgmma_tma  warp specialisation: warpgroup 0 is a producer whose one thread
//                     asks the Tensor Memory Accelerator (TMA) for whole tiles
//                     (cp.async.bulk.tensor, swizzled by the copy engine itself) and
//                     signals their arrival through mbarriers; warpgroups 1 and 2 only
//                     issue wgmma. Tensor maps (cuTensorMapEncodeTiled on the host,
//                     cudl.tma) live in global memory, 128 bytes each.
// Limit: the targets are 90% of cuBLAS at 4096^3 on the H100 for hgemm_5; cuBLAS adds
// clusters with TMA multicast, persistent blocks, a TMA store epilogue, setmaxnreg.
// Launch: hgemm_4: block 256, grid (N / 256, M / 128), shared_mem = SMEM_BYTES;
//         hgemm_5: block 384, same grid and shared memory. M multiple of 128, N of 256,
//         K of 64 (no bounds checks); 16-byte aligned rows. Compiled for other GPUs (and
//         on the CPU emulator) the kernels are empty: load them with -arch=sm_90a.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers

#define BM 128
#define BN 256
#define BK 64  // 64 halves = 128 bytes: one swizzled row
#ifndef STAGES
#define STAGES 4
#endif
#define A_BYTES (BM * BK * 2)  // 16 KiB
#define B_BYTES (BK * BN * 2)  // 32 KiB
#define STAGE_BYTES (A_BYTES + B_BYTES)
// + 1024 to align the ring to a swizzle atom, + 2 x STAGES mbarriers of 8 bytes
#define SMEM_BYTES (STAGES * STAGE_BYTES + 1024 + 16 * STAGES)
// descriptor strides of the B tile (N-major): 64-wide column blocks 8 KiB apart (LBO),
// groups of 8 rows of K 1 KiB apart (SBO)
#ifndef B_LBO
#define B_LBO 8192
#endif
#ifndef B_SBO
#define B_SBO 1024
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HGEMM_SM90A 1
#endif

#ifdef HGEMM_SM90A
// The 4 wgmma of one 64-wide K step for warpgroup wg: A rows 64 wg ... 64 wg + 63.
// k16 step kk: A advances 32 bytes inside its swizzled rows, B two 1 KiB atoms.
__device__ __forceinline__ void mma_step(float* d, unsigned a, unsigned b, int wg) {
    wgmma_fence();
    for (int kk = 0; kk < BK / 16; kk++)
        wgmma_64x256x16(d, desc(a + wg * 64 * 128 + kk * 32, 16, 1024),
                        desc(b + kk * 16 * 128, B_LBO, B_SBO));
    wgmma_commit();
}
#endif

// Accumulator layout (per warpgroup, like 32 mma.sync tiles of 16 x 8 side by side): warp
// w of the warpgroup owns rows 16 w ... 16 w + 15; lane (g = lane / 4, t = lane % 4)
// holds d[4 j + 0, 1] at row g, columns 8 j + 2 t, + 1 and d[4 j + 2, 3] at row g + 8.
__device__ __forceinline__ void store_tile(float* C, int N, size_t row, int col,
                                           const float* d) {
    for (int j = 0; j < BN / 8; j++) {
        size_t n = col + 8 * j;
        *reinterpret_cast<float2*>(&C[row * N + n]) = make_float2(d[4 * j], d[4 * j + 1]);
        *reinterpret_cast<float2*>(&C[(row + 8) * N + n]) =
            make_float2(d[4 * j + 2], d[4 * j + 3]);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1)
hgemm_4_wgmma(int M, int N, int K, const __half* __restrict__ A,
              const __half* __restrict__ B, float* __restrict__ C) {
#ifdef HGEMM_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned ring = (smem_addr(smem) + 1023) & ~1023u;  // swizzle atoms: 1 KiB
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, w = (tid % 128) / 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, steps = K / BK;
    float d[128] = {};

    auto load = [&](int step) {  // 1024 + 2048 chunks of 16 bytes: 4 + 8 per thread
        const unsigned a = ring + (step % STAGES) * STAGE_BYTES, b = a + A_BYTES;
        const int k0 = step * BK;
        for (int c = tid; c < BM * BK / 8; c += 256) {
            int r = c / 8, kc = c % 8;
            const __half* src = &A[(size_t)(row0 + r) * K + k0 + kc * 8];
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                         :: "r"(a + swz(r * 128 + kc * 16)), "l"(src));
        }
        for (int c = tid; c < BK * BN / 8; c += 256) {
            int k = c / 32, nc = c % 32;  // 32 chunks per row of 256: block nc / 8
            const __half* src = &B[(size_t)(k0 + k) * N + col0 + nc * 8];
            unsigned off = (nc / 8) * 8192 + swz(k * 128 + (nc % 8) * 16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                         :: "r"(b + off), "l"(src));
        }
    };
    for (int step = 0; step < STAGES - 1; step++) {
        if (step < steps) load(step);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int step = 0; step < steps; step++) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2) : "memory");
        // the copies wrote through the generic proxy; wgmma reads through the async one
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // everyone's copies landed; the slot of step - 1 is free
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        asm volatile("cp.async.commit_group;\n" ::);
        const unsigned a = ring + (step % STAGES) * STAGE_BYTES;
        mma_step(d, a, a + A_BYTES, wg);
        wgmma_wait<0>();  // the slot is overwritten after the next barrier
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    store_tile(C, N, row0 + wg * 64 + 16 * w + lane / 4, col0 + 2 * (lane % 4), d);
#endif
}

// map_a: A as K x M (contiguous K), box 64 x 128; map_b: B as N x K, box 64 x 64; both
// with the 128-byte swizzle.
extern "C" __global__ void __launch_bounds__(384, 1)
hgemm_5_wgmma_tma(int M, int N, int K, const unsigned long long* __restrict__ map_a,
                  const unsigned long long* __restrict__ map_b, float* __restrict__ C) {
#ifdef HGEMM_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned ring = (smem_addr(smem) + 1023) & ~1023u;
    const unsigned full = ring + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, w = (tid % 128) / 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, steps = K / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full + 8 * s, 1);   // the producer's arrive (+ the TMA bytes)
            mbar_init(empty + 8 * s, 2);  // one arrive per consumer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // producer: one thread keeps the ring full
        if (tid == 0)
            for (int step = 0; step < steps; step++) {
                const int s = step % STAGES, round = step / STAGES;
                if (round > 0) mbar_wait(empty + 8 * s, (round - 1) & 1);
                const unsigned a = ring + s * STAGE_BYTES, bar = full + 8 * s;
                mbar_expect(bar, STAGE_BYTES);
                tma_load(a, map_a, step * BK, row0, bar);
                for (int j = 0; j < BN / 64; j++)
                    tma_load(a + A_BYTES + j * 8192, map_b, col0 + 64 * j, step * BK,
                             bar);
            }
        return;
    }
    float d[128] = {};
    for (int step = 0; step < steps; step++) {  // consumers: warpgroups 1 and 2
        const int s = step % STAGES;
        mbar_wait(full + 8 * s, (step / STAGES) & 1);
        const unsigned a = ring + s * STAGE_BYTES;
        mma_step(d, a, a + A_BYTES, wg - 1);
        wgmma_wait<1>();  // the wgmma of step - 1 are done: release its slot
        if (step > 0 && tid % 128 == 0) mbar_arrive(empty + 8 * ((step - 1) % STAGES));
    }
    wgmma_wait<0>();
    store_tile(C, N, row0 + (wg - 1) * 64 + 16 * w + lane / 4, col0 + 2 * (lane % 4), d);
#endif
}
