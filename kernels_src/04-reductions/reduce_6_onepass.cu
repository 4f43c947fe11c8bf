// sum and max, version 6: one pass with a last-block finish. Every block reduces its
// grid-stride share (float4 loads, as in version 5) and writes one partial; then it takes
// a ticket from a global counter.
// The block that draws the last ticket knows all other partials are written, sums them in
// a fixed order and writes the result: one launch, no second kernel, and the same bits on
// every run (no atomics touch the data, so the order of additions never changes).
// The reduction is written once as a template over its operator (Sum, Max); the extern
// "C" kernels sum_onepass and max_onepass instantiate it. Max propagates NaN, like
// torch.amax.
// Limit: 4 bytes/element read once; target >= 85% of the copy bandwidth and >= torch.sum
// at 2^28 floats.
// Launch: blockDim.x a multiple of 32 (<= 1024); gridDim.x <= the length of `partials`;
// *counter must be 0 before the first launch (the last block resets it, so the same
// counter serves the next launch).

#define WARP_SIZE 32           // lanes per warp on every NVIDIA GPU
#define FULL_MASK 0xffffffffu  // all 32 lanes take part in each shuffle

struct Sum {
    __device__ static float identity() { return 0.0f; }
    __device__ static float combine(float a, float b) { return a + b; }
};

struct Max {
    // 0x7f800000 = +infinity
    __device__ static float identity() { return -__int_as_float(0x7f800000); }
    // NaN wins, as in torch.amax (fmaxf would drop it): a != a is true only for NaN.
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

// Thread 0 returns the reduction of v over the block. The caller must __syncthreads()
// between two calls.
template <class Op>
__device__ __forceinline__ float block_reduce(float v) {
    __shared__ float warp_results[WARP_SIZE];  // at most 1024 / 32 = 32 warps
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    v = warp_reduce<Op>(v);
    if (lane == 0) {
        warp_results[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / WARP_SIZE ? warp_results[lane] : Op::identity();
        v = warp_reduce<Op>(v);
    }
    return v;
}

// This thread's grid-stride share of x, reduced in a register.
template <class Op>
__device__ __forceinline__ float thread_reduce(const float* __restrict__ x, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = (reinterpret_cast<unsigned long long>(x) % sizeof(float4)) == 0;
    const long long n4 = aligned ? n / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float acc = Op::identity();
    long long i = first;
    // four independent 16-byte loads in flight
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = x4[i], b = x4[i + stride], c = x4[i + 2 * stride],
                d = x4[i + 3 * stride];
        acc = Op::combine(acc, Op::combine(Op::combine(combine4<Op>(a), combine4<Op>(b)),
                                           Op::combine(combine4<Op>(c),
                                                       combine4<Op>(d))));
    }
    for (; i < n4; i += stride) {
        acc = Op::combine(acc, combine4<Op>(x4[i]));
    }
    // the last n % 4 floats (all if unaligned)
    for (long long j = 4 * n4 + first; j < n; j += stride) {
        acc = Op::combine(acc, x[j]);
    }
    return acc;
}

template <class Op>
__device__ void reduce_onepass(const float* __restrict__ x, float* __restrict__ partials,
                               unsigned int* __restrict__ counter,
                                       float* __restrict__ out, long long n) {
    __shared__ bool is_last;
    float acc = block_reduce<Op>(thread_reduce<Op>(x, n));
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
        // the partial is visible to every block before this block's ticket is
        __threadfence();
        const unsigned int ticket = atomicAdd(counter, 1u);
        is_last = ticket == gridDim.x - 1;
    }
    __syncthreads();  // everyone reads is_last; also separates the two block_reduce calls
    if (!is_last) {
        // the whole block leaves together: no barrier below is skipped by part of a block
        return;
    }
    __threadfence();  // order this block's reads of the partials after the ticket it drew
    // volatile: read what other SMs wrote (from L2), not a stale L1 copy
    const volatile float* p = partials;
    acc = Op::identity();
    // fixed order: deterministic result
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
        acc = Op::combine(acc, p[b]);
    }
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0) {
        *out = acc;
        *counter = 0;  // ready for the next launch
    }
}

extern "C" __global__ void sum_onepass(const float* __restrict__ x,
                                       float* __restrict__ partials,
                                       unsigned int* __restrict__ counter,
                                               float* __restrict__ out, long long n) {
    reduce_onepass<Sum>(x, partials, counter, out, n);
}

extern "C" __global__ void max_onepass(const float* __restrict__ x,
                                       float* __restrict__ partials,
                                       unsigned int* __restrict__ counter,
                                               float* __restrict__ out, long long n) {
    reduce_onepass<Max>(x, partials, counter, out, n);
}
