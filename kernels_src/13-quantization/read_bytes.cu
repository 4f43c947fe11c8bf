// read_bytes: read n 16-byte chunks and do nothing else with them: the time a GEMV would
// take if its arithmetic, its x and its reductions cost nothing, for as many bytes in
// one launch. Every thread keeps IN_FLIGHT loads in flight (a grid-stride loop,
// consecutive threads on consecutive chunks). The XOR of everything a thread read is
// compared with a constant, so that the compiler must keep the loads; *sink is written
// only in the unlikely case that they are equal.
// Launch: any grid, e.g. 4 blocks of 512 threads per SM.

#ifndef IN_FLIGHT
#define IN_FLIGHT 4
#endif

extern "C" __global__ void read_bytes(const uint4* __restrict__ p, long long n,
                                      int* __restrict__ sink) {
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; i + (IN_FLIGHT - 1) * stride < n; i += IN_FLIGHT * stride) {
        uint4 v[IN_FLIGHT];
        for (int j = 0; j < IN_FLIGHT; j++) v[j] = __ldg(p + i + j * stride);  // issued
        for (int j = 0; j < IN_FLIGHT; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = (int)acc;
}
