extern "C" __global__ void bias_relu_rows(const float* __restrict__ x, const float* __restrict__ bias,
                                          float* __restrict__ y, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;  // bug: threads past the last column write into the next row
    int row = blockIdx.y;
    y[row * cols + col] = fmaxf(x[row * cols + col] + bias[col], 0.0f);
}
