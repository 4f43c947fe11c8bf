extern "C" __global__ void rope(float* x, const int* __restrict__ pos, int rows, int heads,
                                int head_dim, float base) {
    const int half = head_dim / 2;
    const long long pairs = (long long)rows * heads * half;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < pairs;
         p += (long long)gridDim.x * blockDim.x) {
        const int i = (int)(p % half);
        const long long head = p / half;               // row * heads + head
        const int row = (int)(head / heads);
        const float angle = pos[row] * powf(base, -2.0f * i / head_dim);
        float s, c;
        sincosf(angle, &s, &c);
        float* h = x + head * head_dim;
        const float x1 = h[i], x2 = h[i + half];       // both read before either is written
        h[i] = x1 * c - x2 * s;
        h[i + half] = x2 * c + h[i] * s;  // BUG: reads the rotated x1
    }
}
