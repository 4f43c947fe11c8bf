// Mutant: the mask compares indices within the tile, not row0 + i and col0 + j.
extern "C" __global__ void causal_mask_tile(float* s, int rows, int cols, int row0, int col0, int S,
                                            float scale) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;  // key col0 + j
    const int i = blockIdx.y * blockDim.y + threadIdx.y;  // query row0 + i
    if (i >= rows || j >= cols) {
        return;
    }
    float* e = s + (long long)i * cols + j;
    const bool masked = j > i || col0 + j >= S;  // BUG: local indices
    *e = masked ? -__int_as_float(0x7f800000) : *e * scale;
}
