extern "C" __global__ void depthwise_nhwc(int N, int H, int W, int C, const float* __restrict__ x,
                                          const float* __restrict__ w, float* __restrict__ y) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)N * H * W * C) return;
    const long long npix = (long long)N * H * W;  // SLOW: the channel is the slowest thread index
    const int c = i / npix;
    const long long pix = i % npix;
    const int q = pix % W, p = (pix / W) % H, n = pix / ((long long)W * H);
    float acc = 0.0f;
    for (int r = 0; r < 3; ++r) {
        const int h = p - 1 + r;
        if (h < 0 || h >= H) continue;  // zero padding
        for (int s = 0; s < 3; ++s) {
            const int ww = q - 1 + s;
            if (ww < 0 || ww >= W) continue;
            acc += x[(((long long)n * H + h) * W + ww) * C + c] * w[(r * 3 + s) * C + c];
        }
    }
    y[pix * C + c] = acc;  // a warp's 32 stores are C floats apart too
}
