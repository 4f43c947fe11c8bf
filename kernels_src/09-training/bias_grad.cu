// A bias added to every row of a rows x cols row-major matrix, Y = X W + b, forward and
// backward. bias_add: y[r, c] = x[r, c] + b[c] (in place when y == x; a layer with an
// activation uses 03-elementwise/bias_gelu.cu instead). Grid-stride, block (256),
// grid (min(ceil(rows cols / 256), 32 x SM count)); memory-bound, 8 bytes per element.
// bias_grad: db[c] = sum over r of dY[r, c], a column sum. For a layer with an
// activation, 08-profiling/bias_gelu_backward.cu fuses this sum into the activation's
// backward; this kernel is for the layers without one (the logits layer) and for any
// other activation.
// Deterministic (no atomics): a 32 x 8 block owns 32 adjacent columns; thread (tx, ty)
// sums rows ty, ty + 8, ... of column tx (a warp reads 32 adjacent floats: coalesced),
// then the 8 partial sums of each column are added in a fixed order from shared memory.
// db is overwritten, not accumulated into.
// Limit: memory-bound, 4 bytes per element of dY; only ceil(cols / 32) blocks, so a
// narrow matrix with many rows leaves most SMs idle (fine for this chapter's batches).
// Launch: block (32, 8), grid (ceil(cols / 32)).

#define TILE_COLS 32  // columns per block = blockDim.x
#define ROW_LANES 8   // row groups per block = blockDim.y

extern "C" __global__ void bias_grad(const float* __restrict__ dy, float* __restrict__ db,
                                     int rows, int cols) {
    __shared__ float partial[ROW_LANES][TILE_COLS + 1];  // + 1: no bank conflicts
    const int c = blockIdx.x * TILE_COLS + threadIdx.x;
    float acc = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += ROW_LANES)
            acc += dy[static_cast<long long>(r) * cols + c];
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float sum = 0.0f;
        for (int k = 0; k < ROW_LANES; ++k) sum += partial[k][threadIdx.x];
        db[c] = sum;
    }
}

extern "C" __global__ void bias_add(const float* x, const float* __restrict__ b, float* y,
                                    int rows, int cols) {
    const long long n = static_cast<long long>(rows) * cols;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (long long i = first; i < n; i += stride) y[i] = x[i] + b[i % cols];
}
