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
// Options: -DSTAGES (4), -DGROUP_M=8 (tiles in bands), -DIN_FLIGHT=2 (kernel 4),
// -DSETMAXNREG and -DPERSISTENT (kernel 5); see their definitions below. -DIGEMM_S8
// builds kernel 5 as chapter 13's int8 GEMM, -DFP8_E4M3 as its fp8 GEMM (kernel 4 is then
// left out): 8-bit A (M x K) and B given as N x K (both K-major: the 8-bit wgmma cannot
// transpose), int32 or fp32 C. The tiles keep their bytes (a swizzled row is 128 8-bit
// values of K instead of 64 halves), so only the element type, the B tile's layout and
// the instruction change.
// Limit: the targets are 90% of cuBLAS at 4096^3 on the H100 for hgemm_5; cuBLAS adds
// clusters with TMA multicast, a TMA store epilogue, ping-pong consumers.
// Launch: hgemm_4: block 256, grid (N / 256, M / 128), shared_mem = SMEM_BYTES;
//         hgemm_5: block 384, same grid and shared memory (with -DPERSISTENT: grid of
//         min(SMs, tiles) blocks). M multiple of 128, N of 256, K of 64 (no bounds
//         checks); 16-byte aligned rows. Compiled for other GPUs (and on the CPU
//         emulator) the kernels are empty: load them with -arch=sm_90a.

#include <cuda_fp16.h>
#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers

#define BM 128
#define BN 256
#if defined(IGEMM_S8) || defined(FP8_E4M3)
#define EIGHT_BIT 1
#define BK 128  // 128 8-bit values = 128 bytes: one swizzled row
#else
#define BK 64  // 64 halves = 128 bytes: one swizzled row
#endif
#ifdef IGEMM_S8
typedef int acc_t;
#else
typedef float acc_t;
#endif
#ifndef STAGES
#define STAGES 4
#endif
#define A_BYTES (BM * 128)  // 16 KiB: BM rows of K
#define B_BYTES (BN * 128)  // 32 KiB: BK rows of N (fp16), or BN rows of K (8-bit)
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

// GROUP_M > 0: blocks walk the tiles of C in bands of GROUP_M tile rows, column by
// column inside a band, so the blocks running at once share A and B tiles in L2.
#ifndef GROUP_M
#define GROUP_M 0
#endif
// IN_FLIGHT (kernel 4): wgmma groups left running while the next step's copies start
// (1: wait for all; 2: the previous step's may still run, loads run STAGES - 2 ahead)
#ifndef IN_FLIGHT  // the chapter times 1 and 2; 2 needs a third stage, so a build of
#if STAGES >= 3     // kernel 5 with 2 stages (the same file) falls back to 1
#define IN_FLIGHT 2
#else
#define IN_FLIGHT 1
#endif
#endif
// SETMAXNREG (kernel 5): the producer gives registers back (40), the consumers take them
// (232 each); PERSISTENT (kernel 5): a grid of one block per SM loops over the tiles.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HGEMM_SM90A 1
#endif

// Tile (tm, tn) of the t-th block in launch order: row by row, or in bands of GROUP_M.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int& tm,
                                        int& tn) {
#if GROUP_M > 0
    const int band = GROUP_M * tiles_n, first = (t / band) * GROUP_M;
    const int rows = min(tiles_m - first, GROUP_M);
    tm = first + (t % band) % rows;
    tn = (t % band) / rows;
#else
    tm = t / tiles_n;
    tn = t % tiles_n;
#endif
}

#ifdef HGEMM_SM90A
// The 4 wgmma of one K step (128 bytes of K) for warpgroup wg: A rows 64 wg ... 64 wg +
// 63. Each wgmma takes 32 bytes of K (k16 in fp16, k32 in 8 bits): A advances 32 bytes
// inside its swizzled rows; the N-major fp16 B two 1 KiB atoms, the K-major 8-bit B 32
// bytes.
__device__ __forceinline__ void mma_step(acc_t* d, unsigned a, unsigned b, int wg) {
    wgmma_fence();
    for (int kk = 0; kk < 4; kk++)
#if defined(IGEMM_S8)
        wgmma_64x256x32_s8(d, desc(a + wg * 64 * 128 + kk * 32, 16, 1024),
                           desc(b + kk * 32, 16, 1024));
#elif defined(FP8_E4M3)
        wgmma_64x256x32_e4m3(d, desc(a + wg * 64 * 128 + kk * 32, 16, 1024),
                             desc(b + kk * 32, 16, 1024));
#else
        wgmma_64x256x16(d, desc(a + wg * 64 * 128 + kk * 32, 16, 1024),
                        desc(b + kk * 16 * 128, B_LBO, B_SBO));
#endif
    wgmma_commit();
}
#endif

// Accumulator layout (per warpgroup, like 32 mma.sync tiles of 16 x 8 side by side): warp
// w of the warpgroup owns rows 16 w ... 16 w + 15; lane (g = lane / 4, t = lane % 4)
// holds d[4 j + 0, 1] at row g, columns 8 j + 2 t, + 1 and d[4 j + 2, 3] at row g + 8.
// The integer accumulators have the same layout. Two neighbours go out as one 8-byte
// store.
__device__ __forceinline__ void store2(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store2(int* p, int x, int y) {
    *reinterpret_cast<int2*>(p) = make_int2(x, y);
}
__device__ __forceinline__ void store_tile(acc_t* C, int N, size_t row, int col,
                                           const acc_t* d) {
    for (int j = 0; j < BN / 8; j++) {
        size_t n = col + 8 * j;
        store2(&C[row * N + n], d[4 * j], d[4 * j + 1]);
        store2(&C[(row + 8) * N + n], d[4 * j + 2], d[4 * j + 3]);
    }
}

#ifndef EIGHT_BIT
extern "C" __global__ void __launch_bounds__(256, 1)
hgemm_4_wgmma(int M, int N, int K, const __half* __restrict__ A,
              const __half* __restrict__ B, float* __restrict__ C) {
#ifdef HGEMM_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned ring = (smem_addr(smem) + 1023) & ~1023u;  // swizzle atoms: 1 KiB
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, w = (tid % 128) / 32;
    int tm, tn;
    tile_of(blockIdx.y * gridDim.x + blockIdx.x, gridDim.y, gridDim.x, tm, tn);
    const int row0 = tm * BM, col0 = tn * BN, steps = K / BK;
    float d[128] = {};
    constexpr int AHEAD = STAGES - IN_FLIGHT;  // K steps loaded ahead of the one computed
    static_assert(AHEAD >= 1, "IN_FLIGHT = 2 needs STAGES >= 3");

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
    for (int step = 0; step < AHEAD; step++) {
        if (step < steps) load(step);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int step = 0; step < steps; step++) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(AHEAD - 1) : "memory");
        // the copies wrote through the generic proxy; wgmma reads through the async one
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // everyone's copies landed, and the wgmma that read slot (step + AHEAD) % STAGES,
        // those of step - IN_FLIGHT, are done in every warpgroup: it can be refilled
        __syncthreads();
        if (step + AHEAD < steps) load(step + AHEAD);
        asm volatile("cp.async.commit_group;\n" ::);
        const unsigned a = ring + (step % STAGES) * STAGE_BYTES;
        mma_step(d, a, a + A_BYTES, wg);
        wgmma_wait<IN_FLIGHT - 1>();  // 0: this step's wgmma are done; 1: the previous
    }
    wgmma_wait<0>();
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    store_tile(C, N, row0 + wg * 64 + 16 * w + lane / 4, col0 + 2 * (lane % 4), d);
#endif
}

#endif  // EIGHT_BIT

// map_a: A (M x K, contiguous K), box 128 rows x 128 bytes; map_b: fp16 B (K x N,
// contiguous N), box 64 x 64, or 8-bit B (N x K, contiguous K), box 64 rows x 128 bytes;
// all with the 128-byte swizzle.
extern "C" __global__ void __launch_bounds__(384, 1)
hgemm_5_wgmma_tma(int M, int N, int K, const unsigned long long* __restrict__ map_a,
                  const unsigned long long* __restrict__ map_b, acc_t* __restrict__ C) {
#ifdef HGEMM_SM90A
    extern __shared__ unsigned char smem[];
    const unsigned ring = (smem_addr(smem) + 1023) & ~1023u;
    const unsigned full = ring + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, w = (tid % 128) / 32;
    const int steps = K / BK, tiles_m = M / BM, tiles_n = N / BN;
#ifdef PERSISTENT  // block b takes tiles b, b + gridDim.x, ...
    const int first = blockIdx.x, stride = gridDim.x, tiles = tiles_m * tiles_n;
#else              // one tile per block
    const int first = blockIdx.y * gridDim.x + blockIdx.x, stride = 1, tiles = first + 1;
#endif
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full + 8 * s, 1);   // the producer's arrive (+ the TMA bytes)
            mbar_init(empty + 8 * s, 2);  // one arrive per consumer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    // `it` counts the K steps of all the tiles: slot it % STAGES, round it / STAGES
    if (wg == 0) {  // producer: one thread keeps the ring full
#ifdef SETMAXNREG
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
#endif
        if (tid == 0)
            for (int t = first, it = 0; t < tiles; t += stride) {
                int tm, tn;
                tile_of(t, tiles_m, tiles_n, tm, tn);
                for (int step = 0; step < steps; step++, it++) {
                    const int s = it % STAGES, round = it / STAGES;
                    if (round > 0) mbar_wait(empty + 8 * s, (round - 1) & 1);
                    const unsigned a = ring + s * STAGE_BYTES, bar = full + 8 * s;
                    mbar_expect(bar, STAGE_BYTES);
                    tma_load(a, map_a, step * BK, tm * BM, bar);
                    for (int j = 0; j < BN / 64; j++)  // 4 boxes of 8 KiB
#ifdef EIGHT_BIT  // rows n of B, K-major like A
                        tma_load(a + A_BYTES + j * 8192, map_b, step * BK,
                                 tn * BN + 64 * j, bar);
#else  // 64-wide column blocks of B
                        tma_load(a + A_BYTES + j * 8192, map_b, tn * BN + 64 * j,
                                 step * BK, bar);
#endif
                }
            }
        return;
    }
#ifdef SETMAXNREG
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
#endif
    for (int t = first, it = 0; t < tiles; t += stride) {  // consumers: warpgroups 1, 2
        int tm, tn;
        tile_of(t, tiles_m, tiles_n, tm, tn);
        acc_t d[128];
        for (int i = 0; i < 128; i++) d[i] = 0;
        for (int step = 0; step < steps; step++, it++) {
            const int s = it % STAGES;
            mbar_wait(full + 8 * s, (it / STAGES) & 1);
            const unsigned a = ring + s * STAGE_BYTES;
            mma_step(d, a, a + A_BYTES, wg - 1);
            wgmma_wait<1>();  // the wgmma of step - 1 are done: release its slot
            if (step > 0 && tid % 128 == 0) mbar_arrive(empty + 8 * ((it - 1) % STAGES));
        }
        wgmma_wait<0>();  // the tile's last slot is free too
        if (tid % 128 == 0) mbar_arrive(empty + 8 * ((it - 1) % STAGES));
        store_tile(C, N, tm * BM + (wg - 1) * 64 + 16 * w + lane / 4,
                   tn * BN + 2 * (lane % 4), d);
    }
#endif
}
