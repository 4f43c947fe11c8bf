// matmul_4_1d_blocktile: each thread computes TM = 8 elements of one column of C, keeping
// them in registers. Per step k it reads one value of B from shared memory and reuses it
// for TM FMAs, and the block's 64 x 64 tile of C halves the global traffic per FLOP again
// (BM * BN / (2 (BM + BN)) = 16 FLOP/B).
// Limit: still about one shared-memory load per FMA (TM + 1 loads for TM FMAs): better,
// but not yet compute-bound.
// Launch: block (BM * BN / TM) = (512), grid (ceil(N / BN), ceil(M / BM)).

#ifndef BM
#define BM 64  // rows of C per block
#endif
#ifndef BN
#define BN 64  // columns of C per block
#endif
#ifndef BK
#define BK 8   // depth of the A and B tiles staged in shared memory per step
#endif
#ifndef TM
#define TM 8   // rows of C per thread
#endif
#define NUM_THREADS (BM * BN / TM)
// Each thread loads exactly one element of each tile.
static_assert(BM * BK == NUM_THREADS && BK * BN == NUM_THREADS,
              "one tile element per thread");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
matmul_4_1d_blocktile(int M, int N, int K, const float* __restrict__ A,
                      const float* __restrict__ B,
                      float* __restrict__ C) {
    __shared__ float As[BM * BK];  // As[m * BK + k]
    __shared__ float Bs[BK * BN];  // Bs[k * BN + n]
    const int tid = threadIdx.x;
    const int rowBlock = blockIdx.y * BM, colBlock = blockIdx.x * BN;
    // This thread's outputs: C[rowBlock + threadRow * TM + i][colBlock + threadCol], i <
    // TM.
    const int threadCol = tid % BN, threadRow = tid / BN;
    // The tile element it loads (consecutive threads: consecutive addresses, coalesced).
    const int aRow = tid / BK, aCol = tid % BK;
    const int bRow = tid / BN, bCol = tid % BN;

    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        const int ar = rowBlock + aRow, ac = k0 + aCol;
        const int br = k0 + bRow, bc = colBlock + bCol;
        // zero outside A
        As[aRow * BK + aCol] = (ar < M && ac < K) ? A[ar * K + ac] : 0.0f;
        // zero outside B
        Bs[bRow * BN + bCol] = (br < K && bc < N) ? B[br * N + bc] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k * BN + threadCol];  // one shared load, reused TM times
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                // same address for the whole warp: broadcast
                acc[i] += As[(threadRow * TM + i) * BK + k] * b;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBlock + threadRow * TM + i, col = colBlock + threadCol;
        if (row < M && col < N) C[row * N + col] = acc[i];
    }
}
