// Correct, another style: the 8 partial sums of a column are combined by a tree in shared memory
// (4 + 4, 2 + 2, 1 + 1), still a fixed order, so the bits do not change from run to run
extern "C" __global__ void column_sum(const float* __restrict__ g, float* __restrict__ out, int rows, int cols) {
    __shared__ float part[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    float sum = 0.0f;
    for (int r = ty; c < cols && r < rows; r += 8) sum += g[(long long)r * cols + c];
    part[ty][tx] = sum;
    for (int half = 4; half > 0; half /= 2) {
        __syncthreads();
        if (ty < half) part[ty][tx] += part[ty + half][tx];
    }
    if (ty == 0 && c < cols) out[c] = part[0][tx];
}
