// Latency hiding: by Little's law a copy reaches bandwidth B only with B x latency bytes
// in flight. Each warp of copy_grid_stride has one 128 B load in flight (one float per
// thread), so it needs many warps per SM;
// copy_grid_stride_ilp4 issues 4 independent loads before its stores and should need a
// quarter of the warps.
// Both should reach ~90% of the measured copy bandwidth once enough bytes are in flight;
// on a GPU whose bandwidth x latency per SM exceeds 128 B x the warps an SM holds,
// copy_grid_stride cannot get there.

extern "C" __global__ void copy_grid_stride(const float* __restrict__ in,
                                            float* __restrict__ out, int n) {
    int stride = gridDim.x * blockDim.x;
    // one load in flight per thread: stop the compiler batching several iterations' loads
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        out[i] = in[i];
}

extern "C" __global__ void copy_grid_stride_ilp4(const float* __restrict__ in,
                                                 float* __restrict__ out, int n) {
    int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 1
    // i + 3 x stride < n, written so that it cannot overflow
    for (; i < n - 3 * stride; i += 4 * stride) {
        // 4 loads in flight
        float a = in[i], b = in[i + stride], c = in[i + 2 * stride],
                d = in[i + 3 * stride];
        out[i] = a;
        out[i + stride] = b;
        out[i + 2 * stride] = c;
        out[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) out[i] = in[i];  // the last < 4 elements of this thread
}
