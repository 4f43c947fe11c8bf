// sum, version 1: every thread adds its element straight into the result with one
// atomicAdd.
// Element i goes to out[i % slots]: slots = 1 is the plain "one address" version; more
// slots spread the same atomics over more addresses (the caller adds the slots up), which
// shows what contention costs.
// Limit: with slots = 1 all n atomics queue at one address in one L2 slice, which handles
// them one at a time: expect about one atomic per clock, far below the 4 bytes/element
// the DRAM could deliver.
// The result is a sequential float32 sum in a random order: it loses accuracy as n grows
// (see section 8).
extern "C" __global__ void sum_atomic(const float* __restrict__ x,
                                      float* __restrict__ out, long long n,
                                      int slots) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&out[i % slots], x[i]);
    }
}
