// Correct but ignores the challenge's idea: no shared-memory tile, so the writes are strided by d0.
extern "C" __global__ void swap_axes(const float* in, float* out, int d0, int d1, int d2) {
    int j = blockIdx.z, k = blockIdx.x * 32 + threadIdx.x;
    for (int r = threadIdx.y; r < 32; r += 8) {
        int i = blockIdx.y * 32 + r;
        if (i < d0 && k < d2)
            out[((long long)k * d1 + j) * d0 + i] = in[((long long)i * d1 + j) * d2 + k];
    }
}
