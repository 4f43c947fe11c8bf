// Mutant: leading dimension of B taken as K.
#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

extern "C" __global__ void wmma_gemm(int M, int N, int K, const __half* __restrict__ A,
                                     const __half* __restrict__ B, float* __restrict__ C) {
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;  // this warp's tile of C
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(a, A + (size_t)row0 * K + k, K);  // leading dim: a row of A
        wmma::load_matrix_sync(b, B + (size_t)k * N + col0, K);  // and of B
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + (size_t)row0 * N + col0, acc, N, wmma::mem_row_major);
}
