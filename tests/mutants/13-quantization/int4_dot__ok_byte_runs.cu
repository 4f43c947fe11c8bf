// Correct, another style: each lane takes runs of 4 neighbouring bytes (8 weights) at a stride of
// 128 bytes, scales after the warp's butterfly sum (__shfl_xor_sync), not before
extern "C" __global__ void int4_dot(int N, int K, const unsigned char* __restrict__ P,
                                    const float* __restrict__ scale,
                                    const float* __restrict__ x, float* __restrict__ y) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const unsigned char* p = P + (size_t)row * (K / 2);
    const int bytes = K / 2;
    float sum = 0.0f;
    for (int j = 4 * lane; j < bytes; j += 128) {
        for (int b = j; b < j + 4 && b < bytes; ++b) {  // up to 4 bytes: 8 weights
            const int v = p[b];
            sum += (float)((v & 15) - 8) * x[2 * b] + (float)((v >> 4) - 8) * x[2 * b + 1];
        }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) y[row] = sum * scale[row];
}
