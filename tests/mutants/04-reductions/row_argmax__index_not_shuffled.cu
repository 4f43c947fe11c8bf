// Mutant: only the value is shuffled; lane 0 keeps its own column index when a larger value arrives.
extern "C" __global__ void row_argmax(const float* __restrict__ x, int* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float v = -__int_as_float(0x7f800000);
    int best = cols;
    for (int c = lane; c < cols; c += 32) {
        if (x[row * cols + c] > v) { v = x[row * cols + c]; best = c; }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        float w = __shfl_down_sync(0xffffffffu, v, offset);
        if (w > v) v = w;
    }
    if (lane == 0) out[row] = best;
}
