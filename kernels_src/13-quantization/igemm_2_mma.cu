// igemm_2_mma: C = A B^T in int8 on the Tensor Cores (A M x K, B N x K, both row-major
// int8; C M x N int32). The structure of chapter 11's hgemm_3_cp_async with int8 data: a
// block of 8 warps (2 x 4) computes a 128 x 128 tile, each warp 64 x 32 = 4 x 4 tiles of
// mma.sync.m16n8k32.s8.s8.s32 (sm_80+); per step of 64 values of K, cp.async copies a 128
// x 64-byte tile of A and of B into a STAGES-deep ring in shared memory. Both operands
// are K-major, so plain ldmatrix (no .trans) yields both fragments: an 8 x 8 b16 matrix
// is 8 rows x 16 int8 values of K, and lane l receives row l / 4, bytes 4 (l % 4) .. + 3,
// exactly the A and B register layouts of m16n8k32. 16-byte chunk c of tile row r is
// stored at c ^ ((r / 2) % 4): the 8 rows one ldmatrix reads hit 8 distinct bank groups.
// sm_75 (T4): each m16n8k32 becomes four mma.sync.m8n8k16 on the same registers, with
// plain 16-byte copies (define IGEMM_SM75 to force that path, e.g. in a test).
// Limit: one mma.sync does 2 x 16 x 8 x 32 = 8192 int ops, twice an fp16 m16n8k16, for
// the same bytes of fragments; expect about 2x hgemm_3's rate. cuBLAS's int8 kernels on
// Hopper use wgmma instead, which mma.sync cannot reach.
// Launch: block THREADS (256), grid (N / BN, M / 128). Requires M a multiple of 128, N
// of BN (128) and K of 64 (no bounds checks); A, B, C 16-byte aligned.
// Options: -DWN=64 gives each warp a 64 x 64 tile (4 x 8 mma per 32 values of K for 4 +
// 4 ldmatrix, instead of 4 x 4 for 4 + 2: fewer shared-memory loads per mma; 4 warps on
// 128 x 128); -DBN=256 a 128 x 256 block tile (a quarter fewer bytes copied per
// product); the block has 2 BN / WN warps (THREADS). Above 48 KiB (STAGES=4, or BN=256
// with 3 stages) the ring moves to dynamic shared memory: launch with shared_mem =
// STAGES (128 + BN) BK bytes (SMEM_BYTES). -DBK=128: 128 values of K per step (half the
// barriers per K; requires K a multiple of 128).

#include "11-tensor-cores/tc_ptx.cuh"  // mma.sync, ldmatrix, cp.async, wgmma wrappers

#define BM 128
#ifndef BN
#define BN 128
#endif
#ifndef WN
#define WN 32  // columns per warp (its rows: 64)
#endif
#define WARPS_N (BN / WN)
#define THREADS (64 * WARPS_N)  // 2 x WARPS_N warps
#ifndef BK
#define BK 64  // bytes = int8 values of K per step (64 or 128)
#endif
#ifndef STAGES
#define STAGES 3  // 3 x (8 + 8) KiB = 48 KiB of static shared memory
#endif
#define SMEM_BYTES (STAGES * (BM + BN) * BK)
#if SMEM_BYTES > 48 * 1024
#define IGEMM_DYNAMIC 1
#endif

#if __CUDA_ARCH__ >= 800 && !defined(IGEMM_SM75)
#define IGEMM_SM80 1
#endif

// byte offset of (row r, byte k) in a tile of rows of BK bytes, 16-byte chunks swizzled
__device__ __forceinline__ int tile_off(int r, int k) {
#if BK == 128  // a row fills the 32 banks: chunk c of row r in bank group c ^ (r % 8)
    return r * BK + ((((k >> 4) ^ r) & 7) << 4) + (k & 15);
#else  // two 64-byte rows per 128 bytes of banks
    return r * BK + ((((k >> 4) ^ (r >> 1)) & 3) << 4) + (k & 15);
#endif
}
// C is 4 bytes per product, more than L2 holds at 4096^2: -DC_STREAM=1 stores it
// evict-first (st.global.cs), so that it pushes fewer lines of A and B out of L2.
__device__ __forceinline__ void store_c(int* p, int2 v) {
#if C_STREAM
    __stcs(reinterpret_cast<int2*>(p), v);
#else
    *reinterpret_cast<int2*>(p) = v;
#endif
}
// cp.async groups: commit closes this thread's copies issued so far, wait_oldest
// leaves at most STAGES - 2 groups in flight.
__device__ __forceinline__ void commit() { cp_async_commit(); }
__device__ __forceinline__ void wait_oldest() { cp_async_wait<STAGES - 2>(); }

extern "C" __global__ void __launch_bounds__(THREADS)
igemm_2_mma(int M, int N, int K, const signed char* __restrict__ A,
            const signed char* __restrict__ B, int* __restrict__ C) {
#ifdef IGEMM_DYNAMIC
    extern __shared__ __align__(128) signed char smem[];
    auto As = reinterpret_cast<signed char(*)[BM * BK]>(smem);
    auto Bs = reinterpret_cast<signed char(*)[BN * BK]>(smem + STAGES * BM * BK);
#else
    __shared__ __align__(128) signed char As[STAGES][BM * BK];
    __shared__ __align__(128) signed char Bs[STAGES][BN * BK];
#endif
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    // the warp's 64 x WN tile
    const int wm = (warp / WARPS_N) * 64, wn = (warp % WARPS_N) * WN;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int steps = K / BK;
    int acc[4][WN / 8][4] = {};

    auto load = [&](int step) {  // 16-byte chunks, BK / 16 per row; B has BM rows or more
        const int s = step % STAGES, k0 = step * BK;
        for (int c = tid; c < BK / 16 * BN; c += THREADS) {
            int r = c / (BK / 16), k = (c % (BK / 16)) * 16;
            if (c < BK / 16 * BM)
                copy16(&As[s][tile_off(r, k)], &A[(size_t)(row0 + r) * K + k0 + k]);
            copy16(&Bs[s][tile_off(r, k)], &B[(size_t)(col0 + r) * K + k0 + k]);
        }
    };
    for (int step = 0; step < STAGES - 1; step++) {
        if (step < steps) load(step);
        commit();
    }
    for (int step = 0; step < steps; step++) {
        wait_oldest();
        __syncthreads();
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        commit();
        const signed char* as = As[step % STAGES];
        const signed char* bs = Bs[step % STAGES];
        for (int kk = 0; kk < BK; kk += 32) {
            unsigned a[4][4], b[WN / 8][2];
            for (int i = 0; i < 4; i++) {  // lanes 0-15: rows at kk, 16-31: at kk + 16
                int r = wm + 16 * i + lane % 16, k = kk + (lane / 16) * 16;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem_addr(&as[tile_off(r, k)])));
            }
            // matrices: (n, k), (n, k+16), (n+8, k), ..
            for (int j = 0; j < WN / 8; j += 2) {
                int n = wn + 8 * j + (lane / 16) * 8 + lane % 8;
                int k = kk + ((lane / 8) % 2) * 16;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]),
                               "=r"(b[j + 1][1])
                             : "r"(smem_addr(&bs[tile_off(n, k)])));
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < WN / 8; j++) mma_16x8x32(acc[i][j], a[i], b[j]);
        }
    }
#ifdef IGEMM_SM80
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
    // accumulator layout: rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < WN / 8; j++) {
            size_t r = row0 + wm + 16 * i + g, n = col0 + wn + 8 * j + 2 * t;
            store_c(&C[r * N + n], make_int2(acc[i][j][0], acc[i][j][1]));
            store_c(&C[(r + 8) * N + n], make_int2(acc[i][j][2], acc[i][j][3]));
        }
}
