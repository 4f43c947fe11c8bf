// MUTANT: A indexed as if it were column-major
#define WARP 32
#define ROWS_PER_BLOCK 8

extern "C" __global__ void matvec(int M, int K, const float* __restrict__ A, const float* __restrict__ x,
                                  float* __restrict__ y) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (row >= M) return;
    float sum = 0.0f;
    for (int c = lane; c < K; c += WARP) sum += A[c * M + row] * x[c];
    for (int offset = WARP / 2; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[row] = sum;
}
