// vector_add, version 2: a grid-stride loop. The grid is sized to the GPU (one full wave
// of blocks), not to the data, and each thread walks i, i + stride, i + 2 stride, ...
// until it passes n.
// Limit: the same 12 bytes per element as version 1; one launch of any size handles any
// n.
// long long indices: i + stride cannot overflow for any int n.
extern "C" __global__ void vector_add_grid_stride(const float* __restrict__ x,
                                                  const float* __restrict__ y,
                                                  float* __restrict__ out, int n) {
    // threads in the whole grid
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        out[i] = x[i] + y[i];
    }
}
