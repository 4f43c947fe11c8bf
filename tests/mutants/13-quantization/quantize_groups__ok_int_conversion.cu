// Correct, another style: the maximum reduced with __shfl_down_sync and broadcast from lane 0, the
// integer made by __float2int_rn (round to nearest even, as rintf) and clamped as an int
extern "C" __global__ void quantize_groups(int rows, int cols, int group,
                                           const float* __restrict__ w,
                                           signed char* __restrict__ q,
                                           float* __restrict__ scale) {
    const int warps_per_block = blockDim.x / 32;
    const int gid = blockIdx.x * warps_per_block + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int groups = (cols + group - 1) / group;
    if (gid >= rows * groups) return;
    const long long first = (long long)(gid / groups) * cols + (long long)(gid % groups) * group;
    const int len = min(group, cols - (gid % groups) * group);
    float amax = 0.0f;
    for (int i = lane; i < len; i += 32) amax = fmaxf(amax, fabsf(w[first + i]));
    for (int d = 16; d > 0; d >>= 1) amax = fmaxf(amax, __shfl_down_sync(0xffffffffu, amax, d));
    amax = __shfl_sync(0xffffffffu, amax, 0);
    const float s = amax / 127.0f;
    if (lane == 0) scale[gid] = s;
    for (int i = lane; i < len; i += 32) {
        int v = amax == 0.0f ? 0 : __float2int_rn(w[first + i] / s);
        v = v > 127 ? 127 : (v < -127 ? -127 : v);
        q[first + i] = (signed char)v;
    }
}
