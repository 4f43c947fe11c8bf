// Mutant: the tiles are placed transposed but each tile is written back as it was read
// (tile[threadIdx.y][threadIdx.x] instead of tile[threadIdx.x][threadIdx.y]).
#define TILE 32

extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int col = blockIdx.x * TILE + threadIdx.x;
    int row = blockIdx.y * TILE + threadIdx.y;
    if (row < rows && col < cols) tile[threadIdx.y][threadIdx.x] = in[(long long)row * cols + col];
    __syncthreads();
    int out_row = blockIdx.x * TILE + threadIdx.y;
    int out_col = blockIdx.y * TILE + threadIdx.x;
    if (out_row < cols && out_col < rows) out[(long long)out_row * rows + out_col] = tile[threadIdx.y][threadIdx.x];
}
