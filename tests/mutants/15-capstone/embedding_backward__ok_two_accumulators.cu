// Correct, another order: even and odd rows of the token in two accumulators (two additions in
// flight), added together at the end; still a fixed order.
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    if (begin == end) return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float even = 0.0f, odd = 0.0f;
        int i = begin;
        for (; i + 1 < end; i += 2) {
            even += dx[(long long)order[i] * C + c];
            odd += dx[(long long)order[i + 1] * C + c];
        }
        if (i < end) even += dx[(long long)order[i] * C + c];
        dwte[(long long)v * C + c] += even + odd;
    }
}
