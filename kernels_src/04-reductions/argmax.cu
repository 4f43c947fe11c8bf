// argmax over a vector in one pass: the skeleton of reduce_6_onepass.cu with (value,
// index) pairs instead of single floats. Ties go to the smallest index and NaN counts as
// larger than any number, as in numpy.argmax and torch.argmax; with that rule the combine
// is associative and commutative, so the tree can pair candidates in any order and still
// return the first maximum.
// Limit: 4 bytes/element read once (the indices live in registers); expect close to
// version 6's bandwidth.
// Launch: blockDim.x a multiple of 32 (<= 1024); gridDim.x <= the length of part_val and
// part_idx;
// *counter must be 0 before the first launch (the last block resets it).

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle
#define NO_INDEX 0x7fffffffffffffffLL  // larger than any index: loses every tie

// Does the candidate (w, j) beat (v, i)? Larger value wins; NaN beats numbers; ties go to
// the smaller index.
__device__ __forceinline__ bool beats(float w, long long j, float v, long long i) {
    if (w != w) {  // w is NaN
        return v == v || j < i;
    }
    if (v != v) {
        return false;
    }
    return w > v || (w == v && j < i);
}

__device__ __forceinline__ void take_if_better(float& v, long long& i, float w,
                                               long long j) {
    if (beats(w, j, v, i)) {
        v = w;
        i = j;
    }
}

__device__ __forceinline__ void warp_argmax(float& v, long long& i) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        float w = __shfl_down_sync(FULL_MASK, v, offset);
        long long j = __shfl_down_sync(FULL_MASK, i, offset);
        take_if_better(v, i, w, j);
    }
}

// Thread 0 ends with the block's best (v, i). The caller must __syncthreads() between two
// calls.
__device__ __forceinline__ void block_argmax(float& v, long long& i) {
    __shared__ float warp_v[WARP_SIZE];  // at most 1024 / 32 = 32 warps
    __shared__ long long warp_i[WARP_SIZE];
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    warp_argmax(v, i);
    if (lane == 0) {
        warp_v[warp] = v;
        warp_i[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        const bool has = lane < blockDim.x / WARP_SIZE;
        v = has ? warp_v[lane] : -__int_as_float(0x7f800000);  // 0x7f800000 = +infinity
        i = has ? warp_i[lane] : NO_INDEX;
        warp_argmax(v, i);
    }
}

extern "C" __global__ void argmax_onepass(const float* __restrict__ x,
                                          float* __restrict__ part_val,
                                          long long* __restrict__ part_idx,
                                                  unsigned int* __restrict__ counter,
                                          long long* __restrict__ out, long long n) {
    __shared__ bool is_last;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = (reinterpret_cast<unsigned long long>(x) % sizeof(float4)) == 0;
    const long long n4 = aligned ? n / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float v = -__int_as_float(0x7f800000);
    long long i = NO_INDEX;
    for (long long k = first; k < n4; k += stride) {
        float4 a = x4[k];
        take_if_better(v, i, a.x, 4 * k);
        take_if_better(v, i, a.y, 4 * k + 1);
        take_if_better(v, i, a.z, 4 * k + 2);
        take_if_better(v, i, a.w, 4 * k + 3);
    }
    // the last n % 4 floats (all if unaligned)
    for (long long j = 4 * n4 + first; j < n; j += stride) {
        take_if_better(v, i, x[j], j);
    }
    block_argmax(v, i);
    if (threadIdx.x == 0) {
        part_val[blockIdx.x] = v;
        part_idx[blockIdx.x] = i;
        __threadfence();
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) {
        return;
    }
    __threadfence();
    // volatile: read what other blocks wrote, not a stale cached copy
    const volatile float* pv = part_val;
    const volatile long long* pi = part_idx;
    v = -__int_as_float(0x7f800000);
    i = NO_INDEX;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
        take_if_better(v, i, pv[b], pi[b]);
    }
    block_argmax(v, i);
    if (threadIdx.x == 0) {
        *out = i;
        *counter = 0;
    }
}
