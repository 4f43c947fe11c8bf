extern "C" __global__ void depthwise_nhwc(int N, int H, int W, int C, const float* __restrict__ x,
                                          const float* __restrict__ w, float* __restrict__ y) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)N * H * W * C) return;
    const int c = i % C;  // the channel is the fastest index: a warp takes 32 neighbouring channels
    const long long pix = i / C;  // the output pixel (n, p, q)
    const int q = pix % W, p = (pix / W) % H, n = pix / ((long long)W * H);
    float acc = 0.0f;
    for (int r = 0; r < 3; ++r) {
        const int h = p - 1 + r;
        for (int s = 0; s < 3; ++s) {
            const int ww = q - 1 + s;
            acc += x[(((long long)n * H + h) * W + ww) * C + c] * w[(r * 3 + s) * C + c];
        }
    }
    y[i] = acc;
}
