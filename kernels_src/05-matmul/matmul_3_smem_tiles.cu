// matmul_3_smem_tiles: each 32 x 32 block stages a TILE x TILE tile of A and of B in
// shared memory, then every thread reads its row and column from there. Each element
// loaded from global memory is used TILE times, so global traffic drops 32-fold (TILE / 4
// = 8 FLOP/B); tiles that stick out of the matrix are zero-filled, so any M, N, K work.
// Limit: 2 shared-memory loads per FMA (0.25 FLOP/B from shared memory): bound by
// shared-memory bandwidth, about 1/8 of the FP32 peak on GPUs with 128 FP32 lanes and 128
// B/clock of shared memory per SM.
// Launch: block (TILE, TILE) = (32, 32), grid (ceil(N / 32), ceil(M / 32)).

#define TILE 32  // = warp size: one warp loads one 128-byte row of a tile

extern "C" __global__ void matmul_3_smem_tiles(int M, int N, int K,
                                               const float* __restrict__ A,
                                               const float* __restrict__ B,
                                                       float* __restrict__ C) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TILE + tx;
    const int row = blockIdx.y * TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // Every thread loads (and later syncs), even those outside C: they supply the
        // tile's zeros.
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them
        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];
        }
        // everyone is done reading before the next iteration overwrites the tiles
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}
