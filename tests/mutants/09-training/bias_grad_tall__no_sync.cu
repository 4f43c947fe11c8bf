
extern "C" __global__ void bias_grad_tall(const float* __restrict__ dy, float* __restrict__ db,
                                      int rows, int cols) {
    __shared__ float part[8][33];  // 8 row lanes x 32 columns; + 1: no bank conflicts
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    if (c < cols)
        for (int r = blockIdx.y * 8 + ty; r < rows; r += 8 * gridDim.y)
            acc += dy[(long long)r * cols + c];
    part[ty][tx] = acc;
    if (ty == 0 && c < cols) {
        float s = 0.0f;
        for (int k = 0; k < 8; ++k) s += part[k][tx];
        atomicAdd(&db[c], s);
    }
}
