// Correct but ignores the challenge's idea: each thread computes its 4 x 4 outputs of the block's
// 64 x 64 tile straight from global memory, with no shared-memory tiles and no register reuse.
extern "C" __global__ void matmul_at_b(int M, int N, int K, const float* A, const float* B,
                                       float* C) {
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            int row = blockIdx.y * 64 + threadIdx.y + 16 * i;
            int col = blockIdx.x * 64 + threadIdx.x + 16 * j;
            if (row >= M || col >= N) continue;
            float acc = 0.0f;
            for (int k = 0; k < K; ++k) acc += A[(long long)k * M + row] * B[(long long)k * N + col];
            C[(long long)row * N + col] = acc;
        }
}
