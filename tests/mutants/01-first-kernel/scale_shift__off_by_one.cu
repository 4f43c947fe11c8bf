// Mutant: `<=` in the loop condition updates x[n], one element past the end.
extern "C" __global__ void scale_shift(float* __restrict__ x, float a, float b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= n; i += gridDim.x * blockDim.x) {
        x[i] = a * x[i] + b;
    }
}
