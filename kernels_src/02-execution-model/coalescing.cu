// Coalescing: memory serves a warp's loads in 32-byte sectors, so what a load costs
// depends on how the 32 addresses of a warp fall into sectors, not on the 4 bytes each
// thread asked for.
// copy_strided reads every stride-th float (out[i] = in[i * stride]): from stride 8 on,
// each 32 B sector delivers 4 useful bytes. Predict useful GB/s = copy bandwidth x 8 / (4
// + min(4 x stride, 32)):
// 100% at stride 1, 22% from stride 8. Where DRAM is read in 64-byte units (two sectors),
// replace 32 by 64:
// 12% from stride 16. (With one float per thread, stride 1 is also limited by loads in
// flight: see copy_inflight.cu.)
// copy_offset reads in[i + offset]: a misaligned warp touches 5 sectors instead of 4, but
// its neighbour reads the shared sector from L2 again, so DRAM traffic hardly grows:
// predict ~100% of copy bandwidth at any offset.
extern "C" __global__ void copy_strided(const float* __restrict__ in,
                                        float* __restrict__ out, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // 64-bit index: n x stride may exceed 2^31
    if (i < n) out[i] = in[(long long)i * stride];
}

extern "C" __global__ void copy_offset(const float* __restrict__ in,
                                       float* __restrict__ out, int n, int offset) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i + offset];
}
