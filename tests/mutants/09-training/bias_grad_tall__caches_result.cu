// grader-test: gpu-only (speed is graded on a GPU only)
// Mutant (gaming the timer): the slow kernel of tests/gpu/slow_variants that keeps the sums of the last
// 8 inputs (by pointer and first value) and, for an input it has seen, copies them to db instead of
// reading 100 MB. The grader restores every __device__ variable to its value after loading before each
// timed run, so the cache is empty every time: the slow kernel is timed, and is SLOW.
#define SLOTS 8
#define MAX_COLS 4096
typedef unsigned long long u64;
__device__ u64 key_ptr[SLOTS];
__device__ unsigned key_bits[SLOTS];
__device__ float sums[SLOTS][MAX_COLS];
__device__ unsigned next_slot, blocks_done;

extern "C" __global__ void bias_grad_tall(const float* __restrict__ dy, float* __restrict__ db,
                                          int rows, int cols) {
    const unsigned bits = __float_as_uint(dy[0]);
    int hit = -1;
    for (int i = 0; i < SLOTS; ++i)
        if (atomicAdd(&key_ptr[i], 0ull) == (u64)dy && atomicAdd(&key_bits[i], 0u) == bits) hit = i;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    if (hit >= 0 && cols <= MAX_COLS) {  // seen: copy the kept sums (db is zero before the launch)
        if (ty == 0 && c < cols && blockIdx.y == 0) db[c] = atomicAdd(&sums[hit][c], 0.0f);
        return;
    }
    __shared__ float part[8][33];
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
    if (tx == 0 && ty == 0) {  // the last block keeps the finished sums for the next call
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
            atomicExch(&blocks_done, 0u);
            if (cols <= MAX_COLS) {
                const unsigned slot = atomicAdd(&next_slot, 1u) % SLOTS;
                for (int j = 0; j < cols; ++j) atomicExch(&sums[slot][j], atomicAdd(&db[j], 0.0f));
                __threadfence();
                atomicExch(&key_bits[slot], bits);
                atomicExch(&key_ptr[slot], (u64)dy);
            }
        }
    }
}
