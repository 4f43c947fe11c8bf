// Row-wise reductions of a rows x cols row-major matrix, as softmax and layer norm need
// them:
// row_sum_block:   one block per row (blockDim.x threads stride over the row, then a
// block reduction);
// row_sum_warp, row_max_warp, row_argmax_warp: one warp per row (blockDim.x / 32 rows per
// block): the 32 lanes stride over the row with float4 loads and finish with 5 shuffles;
// no shared memory, no barrier.
// Max propagates NaN like torch.amax; argmax returns the first maximum (NaN counts as the
// largest), like torch.argmax. float4 loads are used when cols % 4 == 0 and the row is
// 16-byte aligned, else one float.
// Limit: 4 bytes/element read once: target the copy bandwidth, >= torch.sum/amax(dim=1)
// at 32768 x 4096.
// Launch: block per row: grid = rows, blockDim.x a multiple of 32; warp per row: grid =
// ceil(rows / (blockDim.x / 32)), blockDim.x a multiple of 32.

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle
#define NO_INDEX 0x7fffffffffffffffLL  // larger than any index: loses every tie

struct Sum {
    __device__ static float identity() { return 0.0f; }
    __device__ static float combine(float a, float b) { return a + b; }
};

struct Max {
    // 0x7f800000 = +infinity
    __device__ static float identity() { return -__int_as_float(0x7f800000); }
    // NaN wins
    __device__ static float combine(float a, float b) {
        return (a > b || a != a) ? a : b;
    }
};

template <class Op>
__device__ __forceinline__ float combine4(float4 a) {
    return Op::combine(Op::combine(a.x, a.y), Op::combine(a.z, a.w));
}

template <class Op>
__device__ __forceinline__ float warp_reduce(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v = Op::combine(v, __shfl_down_sync(FULL_MASK, v, offset));
    }
    return v;
}

// Reduce r[first], r[first + step], ... (a thread's share of one row) in a register.
template <class Op>
__device__ __forceinline__ float strided_reduce(const float* __restrict__ r, int cols,
                                                int first, int step) {
    const bool vec = cols % 4 == 0 &&
                     reinterpret_cast<unsigned long long>(r) % sizeof(float4) == 0;
    const int c4 = vec ? cols / 4 : 0;
    const float4* r4 = reinterpret_cast<const float4*>(r);
    float acc = Op::identity();
    int k = first;
    // four independent 16-byte loads in flight
    for (; k + 3 * step < c4; k += 4 * step) {
        float4 a = r4[k], b = r4[k + step], c = r4[k + 2 * step], d = r4[k + 3 * step];
        acc = Op::combine(acc, Op::combine(Op::combine(combine4<Op>(a), combine4<Op>(b)),
                                           Op::combine(combine4<Op>(c),
                                                       combine4<Op>(d))));
    }
    for (; k < c4; k += step) {
        acc = Op::combine(acc, combine4<Op>(r4[k]));
    }
    // rows that cannot use float4 go one float at a time
    for (int c = 4 * c4 + first; c < cols; c += step) {
        acc = Op::combine(acc, r[c]);
    }
    return acc;
}

extern "C" __global__ void row_sum_block(const float* __restrict__ x,
                                         float* __restrict__ out, int rows, int cols) {
    __shared__ float warp_sums[WARP_SIZE];  // at most 1024 / 32 = 32 warps
    const long long row = blockIdx.x;
    if (row >= rows) {
        return;  // the whole block leaves: no barrier is skipped by part of it
    }
    float v = strided_reduce<Sum>(x + row * cols, cols, threadIdx.x, blockDim.x);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    v = warp_reduce<Sum>(v);
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = warp_reduce<Sum>(lane < blockDim.x / WARP_SIZE ? warp_sums[lane] : 0.0f);
        if (lane == 0) {
            out[row] = v;
        }
    }
}

template <class Op>
__device__ __forceinline__ void row_reduce_warp(const float* __restrict__ x,
                                                float* __restrict__ out,
                                                int rows, int cols) {
    const int lane = threadIdx.x % WARP_SIZE;
    const long long row = (long long)blockIdx.x * (blockDim.x / WARP_SIZE)
                          + threadIdx.x / WARP_SIZE;
    if (row >= rows) {
        // the whole warp leaves together, so the shuffles below always have all 32 lanes
        return;
    }
    float v = warp_reduce<Op>(strided_reduce<Op>(x + row * cols, cols, lane, WARP_SIZE));
    if (lane == 0) {
        out[row] = v;
    }
}

extern "C" __global__ void row_sum_warp(const float* __restrict__ x,
                                        float* __restrict__ out, int rows, int cols) {
    row_reduce_warp<Sum>(x, out, rows, cols);
}

extern "C" __global__ void row_max_warp(const float* __restrict__ x,
                                        float* __restrict__ out, int rows, int cols) {
    row_reduce_warp<Max>(x, out, rows, cols);
}

// Does the candidate (w, j) beat (v, i)? Larger value wins; NaN beats numbers; ties go to
// the smaller index.
__device__ __forceinline__ bool beats(float w, long long j, float v, long long i) {
    if (w != w) {
        return v == v || j < i;
    }
    if (v != v) {
        return false;
    }
    return w > v || (w == v && j < i);
}

extern "C" __global__ void row_argmax_warp(const float* __restrict__ x,
                                           long long* __restrict__ out, int rows,
                                           int cols) {
    const int lane = threadIdx.x % WARP_SIZE;
    const long long row = (long long)blockIdx.x * (blockDim.x / WARP_SIZE)
                          + threadIdx.x / WARP_SIZE;
    if (row >= rows) {
        return;
    }
    const float* r = x + row * cols;
    const bool vec = cols % 4 == 0 &&
                     reinterpret_cast<unsigned long long>(r) % sizeof(float4) == 0;
    const int c4 = vec ? cols / 4 : 0;
    const float4* r4 = reinterpret_cast<const float4*>(r);
    float v = -__int_as_float(0x7f800000);
    long long i = NO_INDEX;
    for (int k = lane; k < c4; k += WARP_SIZE) {
        float4 a = r4[k];
        if (beats(a.x, 4 * k, v, i)) { v = a.x; i = 4 * k; }
        if (beats(a.y, 4 * k + 1, v, i)) { v = a.y; i = 4 * k + 1; }
        if (beats(a.z, 4 * k + 2, v, i)) { v = a.z; i = 4 * k + 2; }
        if (beats(a.w, 4 * k + 3, v, i)) { v = a.w; i = 4 * k + 3; }
    }
    for (int c = 4 * c4 + lane; c < cols; c += WARP_SIZE) {
        if (beats(r[c], c, v, i)) { v = r[c]; i = c; }
    }
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        float w = __shfl_down_sync(FULL_MASK, v, offset);
        long long j = __shfl_down_sync(FULL_MASK, i, offset);
        if (beats(w, j, v, i)) { v = w; i = j; }
    }
    if (lane == 0) {
        out[row] = i;
    }
}
