extern "C" __global__ void silu_forward(const float* __restrict__ x, float* __restrict__ y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = 1.0f / (1.0f + expf(-x[i]));  // bug: sigmoid(x), not x * sigmoid(x)
    }
}
