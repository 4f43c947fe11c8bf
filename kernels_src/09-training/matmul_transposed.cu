// The two transposed products of a linear layer's backward pass, Y = X W (X: batch x in,
// W: in x out, row-major): dW = X^T dY and dX = dY W^T. Chapter 5's kernels compute
// C = A B only; these read A (or B) transposed from the same row-major storage, so no
// transposed copy is ever made:
//   matmul_tn: C[M x N] = A^T B with A stored K x M and B stored K x N;
//   matmul_nt: C[M x N] = A B^T with A stored M x K and B stored N x K.
// Both are chapter 5's shared-memory tiling (matmul_3_smem_tiles.cu) with 16 x 16 tiles:
// every global load is coalesced (a warp reads along a stored row), and the tile is read
// from shared memory in the transposed order. Tiles that stick out are zero-filled.
// Split-K (matmul_tn): a weight gradient sums over the batch, K = batch rows (times
// pixels for a convolution: 8192 for this chapter's first conv) while M x N is tiny
// (9 x 16), so one block per tile would leave the GPU empty and walk K alone. With
// gridDim.z = S > 1, block z sums only its slice of K and adds its tile to C with
// atomicAdd: C must be zero before the launch (the gradients are), and the order of the
// additions, so the last bits, may change from run to run. With gridDim.z = 1 it stores
// C, as matmul_nt does.
// Limit: 2 shared loads per FMA, as matmul_3; at this chapter's sizes (a few hundred rows
// and columns) each launch is a few microseconds, and a 16 x 16 tile gives 4x more blocks
// than a 32 x 32 one to fill the SMs.
// Launch: block (16, 16), grid (ceil(N / 16), ceil(M / 16), S); each z slice covers
// ceil(K / S) rows of K rounded up to a multiple of 16 (S = 1 for matmul_nt).

#define TILE 16  // 256 threads per block

extern "C" __global__ void matmul_tn(int M, int N, int K, const float* __restrict__ A,
                                     const float* __restrict__ B, float* __restrict__ C) {
    __shared__ float As[TILE][TILE];  // As[k][m]: A's tile as stored (rows k)
    __shared__ float Bs[TILE][TILE];  // Bs[k][n]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const int m_load = blockIdx.y * TILE + tx;  // a warp loads along A's stored rows
    const int slice = (K + gridDim.z * TILE - 1) / (gridDim.z * TILE) * TILE;
    const int k_begin = blockIdx.z * slice, k_end = min(K, k_begin + slice);
    float acc = 0.0f;
    for (int k0 = k_begin; k0 < k_end; k0 += TILE) {
        const int k = k0 + ty;
        const bool in_k = k < k_end;
        As[ty][tx] =
            (in_k && m_load < M) ? A[static_cast<long long>(k) * M + m_load] : 0.0f;
        Bs[ty][tx] = (in_k && col < N) ? B[static_cast<long long>(k) * N + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) acc += As[kk][ty] * Bs[kk][tx];
        __syncthreads();
    }
    if (row < M && col < N) {
        float* c = C + static_cast<long long>(row) * N + col;
        if (gridDim.z == 1) *c = acc;
        else atomicAdd(c, acc);
    }
}

extern "C" __global__ void matmul_nt(int M, int N, int K, const float* __restrict__ A,
                                     const float* __restrict__ B, float* __restrict__ C) {
    __shared__ float As[TILE][TILE];      // As[m][k]
    __shared__ float Bs[TILE][TILE + 1];  // Bs[n][k]; + 1: column reads without conflicts
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const int n_load = blockIdx.x * TILE + ty;  // B's stored row n, read along k
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int k = k0 + tx;
        As[ty][tx] = (row < M && k < K) ? A[static_cast<long long>(row) * K + k] : 0.0f;
        Bs[ty][tx] =
            (n_load < N && k < K) ? B[static_cast<long long>(n_load) * K + k] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[tx][kk];
        __syncthreads();
    }
    if (row < M && col < N) C[static_cast<long long>(row) * N + col] = acc;
}
