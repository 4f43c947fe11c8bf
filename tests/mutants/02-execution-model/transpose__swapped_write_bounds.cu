// Mutant: the write is guarded with the bounds of `in` (rows x cols) instead of those of `out` (cols x rows),
// so non-square matrices lose elements or write outside their tile.
#define TILE 32

extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int col = blockIdx.x * TILE + threadIdx.x;
    int row = blockIdx.y * TILE + threadIdx.y;
    if (row < rows && col < cols) tile[threadIdx.y][threadIdx.x] = in[(long long)row * cols + col];
    __syncthreads();
    int out_row = blockIdx.x * TILE + threadIdx.y;
    int out_col = blockIdx.y * TILE + threadIdx.x;
    if (out_row < rows && out_col < cols) out[(long long)out_row * rows + out_col] = tile[threadIdx.x][threadIdx.y];
}
