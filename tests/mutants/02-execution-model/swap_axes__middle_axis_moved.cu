// Mutant: the output is laid out as (d1, d2, d0): the middle axis moved.
#define TILE 32  // tile edge
#define ROWS 8   // thread rows per block: each thread moves TILE / ROWS elements per side

extern "C" __global__ void swap_axes(const float* __restrict__ in, float* __restrict__ out,
                                     int d0, int d1, int d2) {
    __shared__ float tile[TILE][TILE + 1];  // +1: a column of the tile spans all 32 banks
    int j = blockIdx.z;  // the middle axis stays in place: one (d0 x d2) plane per blockIdx.z
    int k = blockIdx.x * TILE + threadIdx.x;  // along d2, contiguous in `in`
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        int i = blockIdx.y * TILE + r;
        if (i < d0 && k < d2) tile[r][threadIdx.x] = in[((long long)i * d1 + j) * d2 + k];
    }
    __syncthreads();
    int i = blockIdx.y * TILE + threadIdx.x;  // along d0, contiguous in `out`
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        int k_out = blockIdx.x * TILE + r;
        if (i < d0 && k_out < d2) out[((long long)j * d2 + k_out) * d0 + i] = tile[threadIdx.x][r];
    }
}
