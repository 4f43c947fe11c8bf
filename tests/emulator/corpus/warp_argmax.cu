// Warp-level argmax with shuffles of a value and its index (ties: the smaller index).
#define FULL_MASK 0xffffffff

__device__ __forceinline__ void warp_argmax(float &v, int &idx) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        float ov = __shfl_down_sync(FULL_MASK, v, offset);
        int oi = __shfl_down_sync(FULL_MASK, idx, offset);
        if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
    }
}

__global__ void row_argmax(const float* __restrict__ x, int* __restrict__ out, int cols) {
    const float* row = x + (size_t)blockIdx.x * cols;
    float best = row[0]; int bi = 0;
    for (int c = threadIdx.x; c < cols; c += 32)
        if (row[c] > best) { best = row[c]; bi = c; }
    warp_argmax(best, bi);
    if (threadIdx.x == 0) out[blockIdx.x] = bi;
}
