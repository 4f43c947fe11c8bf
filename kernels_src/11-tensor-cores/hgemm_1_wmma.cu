// hgemm_1_wmma: C = A B with fp16 inputs and fp32 accumulation on Tensor Cores through
// the WMMA API (nvcuda::wmma, sm_70+). A is M x K, B is K x N, C is M x N, all
// row-major; A and B are __half, C is float. A block of WARPS_M x WARPS_N warps computes
// a BM x BN tile of C (default 64 x 64 with 2 x 2 warps: each warp owns a 32 x 32
// quarter, 2 x 2 accumulator fragments of 16 x 16; -DBM=128 -DBN=128 -DWARPS_N=4 gives 8
// warps of 64 x 32). Per step the block stages a BM x BK tile of A and a BK x BN tile of
// B in shared memory (BK = 32, or -DBK=64; rows padded by 8 halves against bank
// conflicts; 16-byte vector copies), then each warp issues FM x FN x BK / 16 mma_sync
// calls of 16 x 16 x 16.
// Limit: loads and math alternate (one stage, two barriers per step), the copies pass
// through registers, and a 64 x 64 tile reuses each loaded element only 64 times: the
// chapter's target is 40% of cuBLAS at 4096^3, far from the Tensor Core peak.
// Launch: block 32 x WARPS_M x WARPS_N (128), grid (N / BN, M / BM). Requires M and N
// multiples of BM and BN, K a multiple of BK (no bounds checks); 16-byte alignment.

#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef WARPS_N
#define WARPS_N 2
#endif
#define WARPS_M 2
#define THREADS (32 * WARPS_M * WARPS_N)
#define FM (BM / WARPS_M / 16)  // accumulator fragments per warp, down
#define FN (BN / WARPS_N / 16)  // and across
#ifndef BK
#define BK 32  // 64: half as many steps (and barriers) per product, twice the tiles
#endif
#define PAD 8  // halves of padding per shared row (keeps rows 16-byte aligned)
// DOUBLE_BUFFER: two tiles of each in shared memory; the next step's tiles are read from
// global memory into registers before this step's products and stored to the other
// buffer after them, so one barrier per step and the loads overlap the math.
#ifdef DOUBLE_BUFFER
#define NBUF 2
#else
#define NBUF 1
#endif
#define CA (BM * BK / 8 / THREADS)  // 16-byte chunks of A per thread and step
#define CB (BK * BN / 8 / THREADS)  // and of B
static_assert(CA * THREADS * 8 == BM * BK && CB * THREADS * 8 == BK * BN,
              "each thread copies whole 16-byte chunks");

extern "C" __global__ void __launch_bounds__(THREADS)
hgemm_1_wmma(int M, int N, int K, const __half* __restrict__ A,
             const __half* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(32) __half As[NBUF][BM][BK + PAD];
    __shared__ __align__(32) __half Bs[NBUF][BK][BN + PAD];
    const int tid = threadIdx.x, warp = tid / 32;
    const int wm = (warp / WARPS_N) * 16 * FM, wn = (warp % WARPS_N) * 16 * FN;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    // BM x 32 halves of A and 32 x BN of B, in 16-byte chunks of 8 halves: chunk
    // chunk c = tid + THREADS i is row c / (BK / 8), column (c % (BK / 8)) 8 of A, and
    // row c / (BN / 8) of B
    uint4 ra[CA], rb[CB];
    auto fetch = [&](int k0) {
        for (int i = 0; i < CA; i++) {
            int c = tid + THREADS * i, r = c / (BK / 8), k = (c % (BK / 8)) * 8;
            ra[i] = *reinterpret_cast<const uint4*>(&A[(size_t)(row0 + r) * K + k0 + k]);
        }
        for (int i = 0; i < CB; i++) {
            int c = tid + THREADS * i, kb = c / (BN / 8), n = (c % (BN / 8)) * 8;
            rb[i] = *reinterpret_cast<const uint4*>(&B[(size_t)(k0 + kb) * N + col0 + n]);
        }
    };
    auto stash = [&](int buf) {
        for (int i = 0; i < CA; i++) {
            int c = tid + THREADS * i;
            *reinterpret_cast<uint4*>(&As[buf][c / (BK / 8)][(c % (BK / 8)) * 8]) = ra[i];
        }
        for (int i = 0; i < CB; i++) {
            int c = tid + THREADS * i;
            *reinterpret_cast<uint4*>(&Bs[buf][c / (BN / 8)][(c % (BN / 8)) * 8]) = rb[i];
        }
    };
    auto multiply = [&](int buf) {
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[FN];
            for (int i = 0; i < FM; i++)
                wmma::load_matrix_sync(a[i], &As[buf][wm + 16 * i][kk], BK + PAD);
            for (int j = 0; j < FN; j++)
                wmma::load_matrix_sync(b[j], &Bs[buf][kk][wn + 16 * j], BN + PAD);
            for (int i = 0; i < FM; i++)
                for (int j = 0; j < FN; j++)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
    };
#ifdef DOUBLE_BUFFER
    fetch(0);
    stash(0);
    __syncthreads();
    for (int k0 = 0, buf = 0; k0 < K; k0 += BK, buf ^= 1) {
        if (k0 + BK < K) fetch(k0 + BK);  // in flight during the products
        multiply(buf);
        if (k0 + BK < K) stash(buf ^ 1);  // the other buffer: nobody reads it now
        __syncthreads();
    }
#else
    for (int k0 = 0; k0 < K; k0 += BK) {
        fetch(k0);
        stash(0);
        __syncthreads();
        multiply(0);
        __syncthreads();  // before the next step overwrites the tiles
    }
#endif
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++) {
            float* c = &C[(size_t)(row0 + wm + 16 * i) * N + col0 + wn + 16 * j];
            wmma::store_matrix_sync(c, acc[i][j], N, wmma::mem_row_major);
        }
}
