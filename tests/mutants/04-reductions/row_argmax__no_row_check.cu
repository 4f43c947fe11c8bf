// Mutant: no row < rows check: warps past the last row read past the input and write past the output.
extern "C" __global__ void row_argmax(const float* __restrict__ x, int* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    float v = -__int_as_float(0x7f800000);
    int best = cols;
    for (int c = lane; c < cols; c += 32) {
        if (x[row * cols + c] > v) { v = x[row * cols + c]; best = c; }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        float w = __shfl_down_sync(0xffffffffu, v, offset);
        int j = __shfl_down_sync(0xffffffffu, best, offset);
        if (w > v || (w == v && j < best)) { v = w; best = j; }
    }
    if (lane == 0) out[row] = best;
}
