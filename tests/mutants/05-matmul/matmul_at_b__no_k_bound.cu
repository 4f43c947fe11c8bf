// Mutant: the last, partial tile of k reads rows of A and B past K.
#define BM 64  // C tile: BM x BN per block
#define BN 64
#define BK 16  // values of k staged in shared memory per step
#define TM 4   // each of the 16 x 16 threads owns a TM x TN block of the C tile
#define TN 4
#define THREADS 256

extern "C" __global__ void matmul_at_b(int M, int N, int K, const float* __restrict__ A,
                                       const float* __restrict__ B, float* __restrict__ C) {
    __shared__ float As[BK][BM];  // As[k][m] = A[k0 + k][m0 + m]: the tile of A^T, kept as A stores it
    __shared__ float Bs[BK][BN];
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = tid; e < BK * BM; e += THREADS) {  // consecutive threads, consecutive m: coalesced
            int k = e / BM, c = e % BM;
            bool in_k = true;
            As[k][c] = in_k && m0 + c < M ? A[(long long)(k0 + k) * M + m0 + c] : 0.0f;
            Bs[k][c] = in_k && n0 + c < N ? B[(long long)(k0 + k) * N + n0 + c] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            for (int i = 0; i < TM; ++i) a[i] = As[k][threadIdx.y * TM + i];  // a broadcast per half-warp
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][threadIdx.x + 16 * j];  // 16 consecutive floats
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // the next tile overwrites As and Bs
    }
    for (int i = 0; i < TM; ++i) {
        int row = m0 + threadIdx.y * TM + i;
        for (int j = 0; j < TN; ++j) {
            int col = n0 + threadIdx.x + 16 * j;
            if (row < M && col < N) C[(long long)row * N + col] = acc[i][j];
        }
    }
}
