// Mutant: keys past the end of the sequence are not masked.
extern "C" __global__ void causal_mask_tile(float* s, int rows, int cols, int row0, int col0, int S,
                                            float scale) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;  // key col0 + j
    const int i = blockIdx.y * blockDim.y + threadIdx.y;  // query row0 + i
    if (i >= rows || j >= cols) {
        return;
    }
    float* e = s + (long long)i * cols + j;
    const bool masked = col0 + j > row0 + i;  // BUG: keys past S stay
    *e = masked ? -__int_as_float(0x7f800000) : *e * scale;
}
