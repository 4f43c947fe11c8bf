extern "C" __global__ void column_sum(const float* __restrict__ g, float* __restrict__ out, int rows, int cols) {
    __shared__ float partial[8][32];  // [row lane][column of the block]
    const int c = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
        for (int r = threadIdx.y * 8; r < rows && r < threadIdx.y * 8 + 8; ++r) sum += g[(long long)r * cols + c];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();  // every thread reaches it: no early return above
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
        for (int y = 0; y < 8; ++y) total += partial[y][threadIdx.x];  // a fixed order
        out[c] = total;
    }
}
