// matmul_2_coalesced: the naive kernel with threadIdx.x running along a row of C. Now the
// 32 threads of a warp read the same element of A (one broadcast) and 32 consecutive
// elements of B (128 contiguous bytes), and write 128 contiguous bytes of C: every load
// and store is coalesced.
// Limit: still 2 loads per FMA from L1/L2 (0.25 FLOP/B): bound by cache bandwidth, far
// below the FP32 peak.
// Launch: block (32, 32), grid (ceil(N / 32), ceil(M / 32)).

extern "C" __global__ void matmul_2_coalesced(int M, int N, int K,
                                              const float* __restrict__ A,
                                              const float* __restrict__ B,
                                                      float* __restrict__ C) {
    // consecutive threads: consecutive columns
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }
}
