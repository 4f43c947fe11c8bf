// Latency: a single thread follows a chain of dependent loads j = next[j], so no load can
// start before the previous one has returned. Time / steps is the latency of one load
// from wherever the chain lives: L1, L2 or DRAM, depending on how many bytes the chain
// covers (its footprint; the chapter links one int per 128 B line in random order).
// Expect tens of ns from L1, a few hundred from L2 and DRAM: nothing to do with
// bandwidth, everything to do with waiting.
extern "C" __global__ void pointer_chase(const int* __restrict__ next,
                                         int* __restrict__ out, int n, int steps) {
    // one thread: one load in flight at any time
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    int j = 0;
    for (int s = 0; s < steps; ++s) {
        j = next[j];
        if (j < 0 || j >= n) j = 0;  // bounds check (never taken for a valid chain)
    }
    // the result depends on every load, so the compiler cannot drop any of them
    out[0] = j;
}
