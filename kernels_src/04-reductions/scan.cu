// Inclusive prefix sum (scan): y[i] = x[0] + ... + x[i].
// scan_block_inclusive: each block scans its tile of blockDim.x elements: a Kogge-Stone
// scan inside each warp with __shfl_up_sync (5 steps), then the first warp scans the warp
// totals and every warp adds the total of the warps before it. The block's total goes to
// block_sums[blockIdx.x].
// scan_add_offsets: after the host has scanned block_sums (recursively, with the same two
// kernels), block b adds the total of tiles 0..b-1 to its tile.
// Limit: the three passes read and write the data twice (16 bytes/element against the 8
// of a copy), so at best half of torch.cumsum, whose single-pass decoupled look-back scan
// (CUB) moves 8 bytes/element.
// Launch: blockDim.x a multiple of 32 (<= 1024), grid = ceil(n / blockDim.x), the same
// blockDim.x for both.

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle

// Inclusive scan of v across the lanes of a warp: lane k returns v_0 + ... + v_k.
__device__ __forceinline__ float warp_inclusive_scan(float v, int lane) {
    for (int offset = 1; offset < WARP_SIZE; offset *= 2) {
        // the value offset lanes to the left
        float left = __shfl_up_sync(FULL_MASK, v, offset);
        if (lane >= offset) {
            v += left;
        }
    }
    return v;
}

extern "C" __global__ void scan_block_inclusive(const float* __restrict__ x,
                                                float* __restrict__ y,
                                                float* __restrict__ block_sums,
                                                        long long n) {
    __shared__ float warp_totals[WARP_SIZE];  // at most 1024 / 32 = 32 warps
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_inclusive_scan(i < n ? x[i] : 0.0f, lane);
    if (lane == WARP_SIZE - 1) {
        warp_totals[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        float t = lane < blockDim.x / WARP_SIZE ? warp_totals[lane] : 0.0f;
        // lane k now holds the total of warps 0..k
        warp_totals[lane] = warp_inclusive_scan(t, lane);
    }
    __syncthreads();
    if (warp > 0) {
        v += warp_totals[warp - 1];
    }
    if (i < n) {
        y[i] = v;
    }
    if (threadIdx.x == blockDim.x - 1) {
        block_sums[blockIdx.x] = v;  // the tile's total (elements past n counted as 0)
    }
}

extern "C" __global__ void scan_add_offsets(float* __restrict__ y,
                                            const float* __restrict__ scanned_sums,
                                            long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x > 0 && i < n) {
        y[i] += scanned_sums[blockIdx.x - 1];  // the total of all tiles before this one
    }
}
