// hgemm_1_wmma: C = A B with fp16 inputs and fp32 accumulation on Tensor Cores through
// the WMMA API (nvcuda::wmma, sm_70+). A is M x K, B is K x N, C is M x N, all
// row-major; A and B are __half, C is float. A block of 4 warps (2 x 2) computes a
// 64 x 64 tile of C: each warp owns a 32 x 32 quarter, 2 x 2 accumulator fragments of
// 16 x 16. Per step the block stages a 64 x 32 tile of A and a 32 x 64 tile of B in
// shared memory (rows padded by 8 halves against bank conflicts; 16-byte vector copies),
// then each warp issues 2 x 2 x 2 mma_sync calls of 16 x 16 x 16.
// Limit: loads and math alternate (one stage, two barriers per step), the copies pass
// through registers, and a 64 x 64 tile reuses each loaded element only 64 times: the
// chapter's target is 40% of cuBLAS at 4096^3, far from the Tensor Core peak.
// Launch: block 128, grid (N / 64, M / 64). Requires M and N multiples of 64 and K a
// multiple of 32 (no bounds checks); A, B, C 16-byte aligned.

#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define PAD 8  // halves of padding per shared row (keeps rows 16-byte aligned)

extern "C" __global__ void __launch_bounds__(128)
hgemm_1_wmma(int M, int N, int K, const __half* __restrict__ A,
             const __half* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(32) __half As[BM][BK + PAD];
    __shared__ __align__(32) __half Bs[BK][BN + PAD];
    const int tid = threadIdx.x, warp = tid / 32;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's quarter
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // 64 x 32 halves of A = 256 chunks of 8; 32 x 64 of B = 256 chunks: 2 each
        for (int c = tid; c < 256; c += 128) {
            int r = c / 4, k = (c % 4) * 8;
            *reinterpret_cast<uint4*>(&As[r][k]) =
                *reinterpret_cast<const uint4*>(&A[(size_t)(row0 + r) * K + k0 + k]);
            int kb = c / 8, n = (c % 8) * 8;
            *reinterpret_cast<uint4*>(&Bs[kb][n]) =
                *reinterpret_cast<const uint4*>(&B[(size_t)(k0 + kb) * N + col0 + n]);
        }
        __syncthreads();
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(a[i], &As[wm + 16 * i][kk], BK + PAD);
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(b[j], &Bs[kk][wn + 16 * j], BN + PAD);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // before the next step overwrites the tiles
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            float* c = &C[(size_t)(row0 + wm + 16 * i) * N + col0 + wn + 16 * j];
            wmma::store_matrix_sync(c, acc[i][j], N, wmma::mem_row_major);
        }
}
