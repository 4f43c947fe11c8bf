// matmul_1_naive: C = A B for row-major fp32 matrices (A is M x K, B is K x N, C is M x
// N), one thread per element of C. threadIdx.x runs down a column of C, so the 32 threads
// of a warp read 32 different rows of A (32 separate 32-byte sectors for 4 useful bytes
// each) and write 32 different rows of C.
// Limit: 2 global loads per FMA (0.25 FLOP/B) with uncoalesced A loads: expect a few % of
// cuBLAS.
// Launch: block (32, 32), grid (ceil(M / 32), ceil(N / 32)). Indices are int: each matrix
// < 2^31 elements.

extern "C" __global__ void matmul_1_naive(int M, int N, int K,
                                          const float* __restrict__ A,
                                          const float* __restrict__ B,
                                                  float* __restrict__ C) {
    // consecutive threads: consecutive rows
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }
}
