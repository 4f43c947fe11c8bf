// matmul_5_2d_blocktile: each thread computes a TM x TN = 8 x 8 square of C. Per step k
// it loads TM values of A and TN values of B from shared memory into registers and does
// TM * TN FMAs with them (an outer product): 16 shared loads for 64 FMAs instead of 72.
// The 128 x 128 block tile gives 32 FLOP/B of global traffic, above the ridge point of
// every GPU here.
// Limit: by the roofline it is compute-bound now; what remains is latency (scalar global
// loads, bank conflicts on the shared-memory reads), which the next two kernels remove.
// Launch: block (BM * BN / (TM * TN)) = (256), grid (ceil(N / BN), ceil(M / BM)).

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 8    // depth of the tiles staged in shared memory per step
#endif
#ifndef TM
#define TM 8    // rows of C per thread
#endif
#ifndef TN
#define TN 8    // columns of C per thread
#endif
#define NUM_THREADS (BM * BN / (TM * TN))
static_assert(NUM_THREADS % BK == 0 && BM % (NUM_THREADS / BK) == 0,
              "A tile loads in whole passes");
static_assert(NUM_THREADS % BN == 0 && BK % (NUM_THREADS / BN) == 0,
              "B tile loads in whole passes");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
matmul_5_2d_blocktile(int M, int N, int K, const float* __restrict__ A,
                      const float* __restrict__ B,
                      float* __restrict__ C) {
    __shared__ float As[BM * BK];  // As[m * BK + k]
    __shared__ float Bs[BK * BN];  // Bs[k * BN + n]
    const int tid = threadIdx.x;
    const int rowBlock = blockIdx.y * BM, colBlock = blockIdx.x * BN;
    // This thread's outputs: rows threadRow * TM + i, columns threadCol * TN + j of the
    // block tile.
    const int threadCol = tid % (BN / TN), threadRow = tid / (BN / TN);
    // Tile loads: the block loads A_STRIDE rows of the A tile (B_STRIDE rows of B) per
    // pass.
    const int aRow = tid / BK, aCol = tid % BK;
    const int bRow = tid / BN, bCol = tid % BN;
    constexpr int A_STRIDE = NUM_THREADS / BK, B_STRIDE = NUM_THREADS / BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regM[TM], regN[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < BM; r += A_STRIDE) {
            const int ar = rowBlock + aRow + r, ac = k0 + aCol;
            As[(aRow + r) * BK + aCol] = (ar < M && ac < K) ? A[ar * K + ac] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < BK; r += B_STRIDE) {
            const int br = k0 + bRow + r, bc = colBlock + bCol;
            Bs[(bRow + r) * BN + bCol] = (br < K && bc < N) ? B[br * N + bc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) regM[i] = As[(threadRow * TM + i) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) regN[j] = Bs[k * BN + threadCol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBlock + threadRow * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = colBlock + threadCol * TN + j;
            if (row < M && col < N) C[row * N + col] = acc[i][j];
        }
    }
}
