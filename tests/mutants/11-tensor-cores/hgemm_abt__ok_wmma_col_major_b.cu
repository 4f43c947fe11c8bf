// Correct, another style (and slow, see tests/gpu/slow_variants): WMMA with col_major B fragments loaded
// straight from global memory, 8 warps each owning a 16-row strip of the 128 x 128 tile
#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

extern "C" __global__ void hgemm_abt(int M, int N, int K, const __half* __restrict__ A,
                                     const __half* __restrict__ B, float* __restrict__ C) {
    const int warp = threadIdx.x / 32;
    const int row0 = blockIdx.y * 128 + warp * 16, col0 = blockIdx.x * 128;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[8];
    for (int j = 0; j < 8; j++) wmma::fill_fragment(acc[j], 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, A + (size_t)row0 * K + k, K);
        for (int j = 0; j < 8; j++) {
            // B is N x K row-major: as a K x N matrix it is column-major with leading dim K
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
            wmma::load_matrix_sync(b, B + (size_t)(col0 + 16 * j) * K + k, K);
            wmma::mma_sync(acc[j], a, b, acc[j]);
        }
    }
    for (int j = 0; j < 8; j++)
        wmma::store_matrix_sync(C + (size_t)row0 * N + col0 + 16 * j, acc[j], N,
                                wmma::mem_row_major);
}
