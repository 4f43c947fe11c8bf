extern "C" __global__ void bias_relu_rows(const float* __restrict__ x, const float* __restrict__ bias,
                                          float* __restrict__ y, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col < cols) y[row * rows + col] = fmaxf(x[row * rows + col] + bias[col], 0.0f);  // bug: row * rows
}
