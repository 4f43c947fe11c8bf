// Mutant: strides by blockDim.x instead of the whole grid, so the blocks overlap and most elements are
// updated several times.
extern "C" __global__ void scale_shift(float* __restrict__ x, float a, float b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x) {
        x[i] = a * x[i] + b;
    }
}
