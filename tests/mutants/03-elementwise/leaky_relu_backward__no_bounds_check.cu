extern "C" __global__ void leaky_relu_backward(const float* __restrict__ dy, const float* __restrict__ x,
                                               float* __restrict__ dx, float slope, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // bug: no `if (i < n)`
    dx[i] = x[i] > 0.0f ? dy[i] : slope * dy[i];
}
