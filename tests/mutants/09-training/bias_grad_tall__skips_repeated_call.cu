// grader-test: gpu-only (speed is graded on a GPU only)
// Mutant (gaming the timer): the slow kernel of tests/gpu/slow_variants (one block per 32 columns) that
// returns at once when called again with the input of its previous launch (same pointer, same first
// value), as a timing loop does: db "already holds the sum". The grader rotates input sets, so no timed
// run has the input of the run before: the slow kernel is timed, and is SLOW.
typedef unsigned long long u64;
__device__ u64 last_ptr;       // the input of the previous launch: its address
__device__ unsigned last_bits; // and its first value
__device__ unsigned blocks_done;

extern "C" __global__ void bias_grad_tall(const float* __restrict__ dy, float* __restrict__ db,
                                          int rows, int cols) {
    const unsigned bits = __float_as_uint(dy[0]);
    if (atomicAdd(&last_ptr, 0ull) == (u64)dy && atomicAdd(&last_bits, 0u) == bits) return;
    __shared__ float part[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    if (c < cols)
        for (int r = ty; r < rows && blockIdx.y == 0; r += 8) acc += dy[(long long)r * cols + c];
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols && blockIdx.y == 0) {
        float s = 0.0f;
        for (int k = 0; k < 8; ++k) s += part[k][tx];
        atomicAdd(&db[c], s);
    }
    if (tx == 0 && ty == 0) {  // the last block to finish remembers the input
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
            atomicExch(&blocks_done, 0u);
            atomicExch(&last_bits, bits);
            atomicExch(&last_ptr, (u64)dy);
        }
    }
}
