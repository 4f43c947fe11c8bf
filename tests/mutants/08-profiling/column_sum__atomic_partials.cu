// grader-test: emulator-needs schedule
// Mutant: each of the 8 row lanes adds its partial sum to out[c] with atomicAdd: the order of the
// additions, and so the last bits of the sum, depend on which lane gets there first
extern "C" __global__ void column_sum(const float* __restrict__ g, float* __restrict__ out, int rows, int cols) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
        for (int r = threadIdx.y; r < rows; r += 8) sum += g[(long long)r * cols + c];
    }
    if (threadIdx.y == 0 && c < cols) out[c] = 0.0f;
    __syncthreads();  // out[c] is zero before anyone adds
    if (c < cols) atomicAdd(&out[c], sum);
}
