// Mutant: roundf (halves away from zero) instead of rintf (halves to even): differs on exact ties
extern "C" __global__ void quantize_groups(int rows, int cols, int group,
                                           const float* __restrict__ w,
                                           signed char* __restrict__ q,
                                           float* __restrict__ scale) {
    const int groups = (cols + group - 1) / group;
    const int gid = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (gid >= rows * groups) return;  // whole warps leave together
    const int row = gid / groups, c0 = (gid % groups) * group;
    const int len = min(group, cols - c0);
    const float* src = w + (size_t)row * cols + c0;
    float amax = 0.0f;
    for (int i = lane; i < len; i += 32) amax = fmaxf(amax, fabsf(src[i]));
    for (int d = 16; d > 0; d /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const float s = amax / 127.0f;
    for (int i = lane; i < len; i += 32) {
        float v = amax > 0.0f ? roundf(src[i] / s) : 0.0f;
        q[(size_t)row * cols + c0 + i] = (signed char)fminf(fmaxf(v, -127.0f), 127.0f);
    }
    if (lane == 0) scale[gid] = s;
}
