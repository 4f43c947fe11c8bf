// Correct, another style: the K steps run from the last to the first, the fragments of one step
// are loaded before the previous step's mma, and the tile is stored through shared memory
#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

extern "C" __global__ void wmma_gemm(int M, int N, int K, const __half* __restrict__ A,
                                     const __half* __restrict__ B, float* __restrict__ C) {
    __shared__ float tile[16 * 16];
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = K - 16; k >= 0; k -= 16) {
        wmma::load_matrix_sync(a, A + (size_t)row0 * K + k, K);
        wmma::load_matrix_sync(b, B + (size_t)k * N + col0, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(tile, acc, 16, wmma::mem_col_major);  // transposed in shared memory
    __syncwarp();
    for (int i = threadIdx.x; i < 256; i += 32)
        C[(size_t)(row0 + i % 16) * N + col0 + i / 16] = tile[i];
}
