// Mutant: every thread adds its element with a plain read-modify-write of partials[blockIdx.x]: the
// threads of a block race (no atomicAdd), so a GPU loses most additions. The emulator runs the threads
// of a block one after another between barriers and gets the right sum unless it detects races.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) partials[blockIdx.x] = 0.0f;
    __syncthreads();
    if (i < n) partials[blockIdx.x] += x[i];
}
