extern "C" __global__ void bias_relu_rows(const float* __restrict__ x, const float* __restrict__ bias,
                                          float* __restrict__ y, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col < cols) y[row * cols + col] = fmaxf(x[row * cols + col] + bias[row], 0.0f);  // bug: bias[row]
}
