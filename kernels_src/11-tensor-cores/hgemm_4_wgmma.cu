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
// -DSETMAXNREG and -DPERSISTENT (kernel 5); see their definitions below.
// Limit: the targets are 90% of cuBLAS at 4096^3 on the H100 for hgemm_5; cuBLAS adds
// clusters with TMA multicast, a TMA store epilogue, ping-pong consumers.
// Launch: hgemm_4: block 256, grid (N / 256, M / 128), shared_mem = SMEM_BYTES;
//         hgemm_5: block 384, same grid and shared memory (with -DPERSISTENT: grid of
//         min(SMs, tiles) blocks). M multiple of 128, N of 256, K of 64 (no bounds
//         checks); 16-byte aligned rows. Compiled for other GPUs (and on the CPU
//         emulator) the kernels are empty: load them with -arch=sm_90a.

#include <cuda_fp16.h>

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

// GROUP_M > 0: blocks walk the tiles of C in bands of GROUP_M tile rows, column by
// column inside a band, so the blocks running at once share A and B tiles in L2.
#ifndef GROUP_M
#define GROUP_M 0
#endif
// IN_FLIGHT (kernel 4): wgmma groups left running while the next step's copies start
// (1: wait for all; 2: the previous step's may still run, loads run STAGES - 2 ahead)
#ifndef IN_FLIGHT
#define IN_FLIGHT 2  // the chapter times 1 and 2
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

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The 128-byte swizzle on a byte offset from a 1024-aligned base: bits 4-6 ^= bits 7-9.
__device__ __forceinline__ unsigned swz(unsigned off) {
    return off ^ (((off >> 7) & 7) << 4);
}
// Shared memory matrix descriptor: start, LBO and SBO in 16-byte units, 128B swizzle.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo,
                                                   unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4)
         | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16
         | (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32
         | 1ull << 62;
}

#ifdef HGEMM_SM90A
// d (64 x 256 per warpgroup, 128 floats per thread) += A (64 x 16, K-major, at da)
// x B (16 x 256, N-major: imm-trans-b = 1, at db).
__device__ __forceinline__ void wgmma_64x256x16(float* d, unsigned long long da,
                                                unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,"
        "%120,%121,%122,%123,%124,%125,%126,%127}, "
        "%128, %129, 1, 1, 1, 0, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),
          "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
          "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
          "+f"(d[127])
        : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
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

#ifdef HGEMM_SM90A
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// arrive and announce the bytes the TMA copies will deliver to this barrier's phase
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}
// spin until the phase of parity `parity` has completed
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
// one 2-D tile of a tensor map into shared memory; x is the contiguous coordinate
__device__ __forceinline__ void tma_load(unsigned dst, const void* map, int x, int y,
                                         unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                 ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
#endif

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
                    for (int j = 0; j < BN / 64; j++)
                        tma_load(a + A_BYTES + j * 8192, map_b, tn * BN + 64 * j,
                                 step * BK, bar);
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
        float d[128];
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
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
