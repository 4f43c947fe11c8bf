// Mutant: multiplies the block index by gridDim.x instead of blockDim.x: blocks overlap and leave gaps.
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = blockIdx.x * gridDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
