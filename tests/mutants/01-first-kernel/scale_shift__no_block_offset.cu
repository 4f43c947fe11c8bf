// Mutant: starts every block at threadIdx.x, so all blocks update the same elements and some never.
extern "C" __global__ void scale_shift(float* __restrict__ x, float a, float b, int n) {
    for (int i = threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        x[i] = a * x[i] + b;
    }
}
