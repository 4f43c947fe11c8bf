// quantize: float32 weights -> 8-bit and 4-bit integers with one scale per group of
// `group` consecutive elements of a row (group = cols: one scale per row, "per channel";
// rows = 1 and group = cols: one scale for the whole tensor, "per tensor"), and back.
//   absmax (symmetric) int8:  s = max|w| / 127, q = rint(w / s) in [-127, 127]
//   zero-point (asymmetric) uint8: lo = min(min w, 0), hi = max(max w, 0),
//       s = (hi - lo) / 255, z = rint(-lo / s), q = clamp(rint(w / s) + z, 0, 255)
//   absmax int4, packed two per byte: s = max|w| / 7, q = clamp(rint(w / s), -8, 7),
//       stored as the nibble q + 8; byte j of a row holds column 2j (low nibble)
//       and 2j + 1 (high)
// One warp per (row, group): a strided pass finds the group's range (shuffle reduction),
// a second pass writes the integers; lane 0 writes the scale. Scales are float32.
// Limit: memory-bound, 4 B read + 1 B (or 0.5 B) written per weight, read twice (the
// second pass mostly from L1/L2); a one-time cost, off the decode path.
// Launch (all): block 128 (4 warps), grid ceil(rows * ceil(cols / group) / 4).
// int4 requires even cols and group (a byte never straddles two groups).


#define WARPS_PER_BLOCK 4

__device__ __forceinline__ float warp_max(float v) {
    for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
__device__ __forceinline__ float warp_min(float v) {
    for (int d = 16; d > 0; d /= 2) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}

// This warp's (row, first column, number of columns) and its index into the scale array;
// false when the warp has no group (the last block sticks out).
__device__ __forceinline__ bool my_group(int rows, int cols, int group, int& row,
                                         int& c0, int& len, int& gid) {
    const int groups = (cols + group - 1) / group;
    gid = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (gid >= rows * groups) return false;
    row = gid / groups;
    c0 = (gid % groups) * group;
    len = min(group, cols - c0);
    return true;
}

extern "C" __global__ void quantize_int8(int rows, int cols, int group,
                                         const float* __restrict__ w,
                                         signed char* __restrict__ q,
                                         float* __restrict__ scale) {
    int row, c0, len, gid;
    if (!my_group(rows, cols, group, row, c0, len, gid)) return;
    const int lane = threadIdx.x % 32;
    const float* src = w + (size_t)row * cols + c0;
    float amax = 0.0f;
    for (int i = lane; i < len; i += 32) amax = fmaxf(amax, fabsf(src[i]));
    amax = warp_max(amax);
    const float s = amax / 127.0f;
    for (int i = lane; i < len; i += 32) {
        float v = amax > 0.0f ? rintf(src[i] / s) : 0.0f;
        q[(size_t)row * cols + c0 + i] = (signed char)fminf(fmaxf(v, -127.0f), 127.0f);
    }
    if (lane == 0) scale[gid] = s;
}

extern "C" __global__ void dequantize_int8(int rows, int cols, int group,
                                           const signed char* __restrict__ q,
                                           const float* __restrict__ scale,
                                           float* __restrict__ w) {
    const int groups = (cols + group - 1) / group;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols) return;
    const int row = i / cols, col = i % cols;
    w[i] = (float)q[i] * scale[row * groups + col / group];
}

extern "C" __global__ void quantize_uint8_zero_point(int rows, int cols, int group,
                                                     const float* __restrict__ w,
                                                     unsigned char* __restrict__ q,
                                                     float* __restrict__ scale,
                                                     unsigned char* __restrict__ zero) {
    int row, c0, len, gid;
    if (!my_group(rows, cols, group, row, c0, len, gid)) return;
    const int lane = threadIdx.x % 32;
    const float* src = w + (size_t)row * cols + c0;
    // the range always holds 0, so 0 is exactly representable
    float lo = 0.0f, hi = 0.0f;
    for (int i = lane; i < len; i += 32) {
        lo = fminf(lo, src[i]);
        hi = fmaxf(hi, src[i]);
    }
    lo = warp_min(lo);
    hi = warp_max(hi);
    const float s = (hi - lo) / 255.0f;
    const float z = s > 0.0f ? rintf(-lo / s) : 0.0f;
    for (int i = lane; i < len; i += 32) {
        float v = s > 0.0f ? rintf(src[i] / s) + z : 0.0f;
        q[(size_t)row * cols + c0 + i] = (unsigned char)fminf(fmaxf(v, 0.0f), 255.0f);
    }
    if (lane == 0) {
        scale[gid] = s;
        zero[gid] = (unsigned char)z;
    }
}

extern "C" __global__ void dequantize_uint8_zero_point(
    int rows, int cols, int group, const unsigned char* __restrict__ q,
    const float* __restrict__ scale, const unsigned char* __restrict__ zero,
    float* __restrict__ w) {
    const int groups = (cols + group - 1) / group;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols) return;
    const int g = (i / cols) * groups + (i % cols) / group;
    w[i] = ((float)q[i] - (float)zero[g]) * scale[g];
}

// int4: lane i handles the column pairs (2i, 2i + 1), (2i + 64, 2i + 65), ...
// of its group
extern "C" __global__ void quantize_int4(int rows, int cols, int group,
                                         const float* __restrict__ w,
                                         unsigned char* __restrict__ packed,
                                         float* __restrict__ scale) {
    int row, c0, len, gid;
    if (!my_group(rows, cols, group, row, c0, len, gid)) return;
    const int lane = threadIdx.x % 32;
    const float* src = w + (size_t)row * cols + c0;
    float amax = 0.0f;
    for (int i = lane; i < len; i += 32) amax = fmaxf(amax, fabsf(src[i]));
    amax = warp_max(amax);
    const float s = amax / 7.0f;
    for (int i = 2 * lane; i < len; i += 64) {
        float lo = amax > 0.0f ? rintf(src[i] / s) : 0.0f;
        float hi = amax > 0.0f ? rintf(src[i + 1] / s) : 0.0f;
        int nlo = (int)fminf(fmaxf(lo, -8.0f), 7.0f) + 8;
        int nhi = (int)fminf(fmaxf(hi, -8.0f), 7.0f) + 8;
        packed[((size_t)row * cols + c0 + i) / 2] = (unsigned char)(nlo | (nhi << 4));
    }
    if (lane == 0) scale[gid] = s;
}

// Unpacking: one thread per byte, two outputs.
extern "C" __global__ void dequantize_int4(int rows, int cols, int group,
                                           const unsigned char* __restrict__ packed,
                                           const float* __restrict__ scale,
                                           float* __restrict__ w) {
    const int groups = (cols + group - 1) / group;
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (size_t)rows * cols / 2) return;
    const int row = 2 * j / cols, col = 2 * j % cols;
    const float s = scale[row * groups + col / group];
    const int b = packed[j];
    w[2 * j] = (float)((b & 15) - 8) * s;
    w[2 * j + 1] = (float)((b >> 4) - 8) * s;
}
