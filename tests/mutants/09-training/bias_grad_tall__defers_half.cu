// grader-test: gpu-only (speed is graded on a GPU only)
// Mutant (gaming the timer): the slow kernel of tests/gpu/slow_variants that, for an input it has seen
// before (8 remembered by pointer and first value), adds only half of the rows, the first half and the
// second half in turn, "the rest in the next launch". Each timed run starts from restored buffers and
// __device__ variables, so it has seen no input: the slow kernel is timed, and is SLOW (were the
// variables kept, the check after the run would find half a sum).
typedef unsigned long long u64;
__device__ u64 seen_ptr[8];
__device__ unsigned seen_bits[8];
__device__ unsigned next_slot, calls, blocks_done;

extern "C" __global__ void bias_grad_tall(const float* __restrict__ dy, float* __restrict__ db,
                                          int rows, int cols) {
    const unsigned bits = __float_as_uint(dy[0]);
    bool again = false;
    for (int i = 0; i < 8; ++i)
        again |= atomicAdd(&seen_ptr[i], 0ull) == (u64)dy && atomicAdd(&seen_bits[i], 0u) == bits;
    int r0 = 0, r1 = rows;
    if (again) {  // half the rows: the first half on even calls, the second on odd ones
        if (atomicAdd(&calls, 0u) % 2) r0 = rows / 2; else r1 = rows / 2;
    }
    __shared__ float part[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    if (c < cols)
        for (int r = r0 + ty; r < r1 && blockIdx.y == 0; r += 8) acc += dy[(long long)r * cols + c];
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols && blockIdx.y == 0) {
        float s = 0.0f;
        for (int k = 0; k < 8; ++k) s += part[k][tx];
        atomicAdd(&db[c], s);
    }
    if (tx == 0 && ty == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
            atomicExch(&blocks_done, 0u);
            atomicAdd(&calls, 1u);
            if (!again) {
                const unsigned slot = atomicAdd(&next_slot, 1u) % 8;
                atomicExch(&seen_bits[slot], bits);
                atomicExch(&seen_ptr[slot], (u64)dy);
            }
        }
    }
}
