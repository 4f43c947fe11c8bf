// Correct but ignores the challenge's idea: 4-byte loads in a grid-stride loop instead of float4.
extern "C" __global__ void fma_float4(const float* x, const float* y, float* z, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = fmaf(x[i], y[i], z[i]);
}
