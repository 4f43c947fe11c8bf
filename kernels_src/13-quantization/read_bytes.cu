// read_bytes: read n 16-byte chunks and do nothing else with them: the time a GEMV would
// take if its arithmetic, its x and its reductions cost nothing, for as many bytes in
// one launch. Every thread keeps 4 loads in flight (grid-stride loop, consecutive
// threads on consecutive chunks), and the XOR of everything it read is compared with a
// constant so that the compiler keeps the loads; the buffer never holds that value's
// pattern in practice, and *sink is written only if it does.
// Launch: any grid, e.g. 4 blocks of 512 threads per SM.

extern "C" __global__ void read_bytes(const uint4* __restrict__ p, long long n,
                                      int* __restrict__ sink) {
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {  // 4 loads issued before any is used
        const uint4 a = __ldg(p + i), b = __ldg(p + i + stride);
        const uint4 c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
        acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = (int)acc;
}
