extern "C" __global__ void int4_dot(int N, int K, const unsigned char* __restrict__ P,
                                    const float* __restrict__ scale,
                                    const float* __restrict__ x, float* __restrict__ y) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N) return;  // the whole warp leaves together: the shuffles stay complete
    const unsigned char* p = P + (size_t)row * K;
    float sum = 0.0f;
    for (int j = lane; j < K / 2; j += 32) {
        const int b = p[j];
        sum += (float)((b & 15) - 8) * x[2 * j] + (float)((b >> 4) - 8) * x[2 * j + 1];
    }
    for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
    if (lane == 0) y[row] = scale[row] * sum;
}
