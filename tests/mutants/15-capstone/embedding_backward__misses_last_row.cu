// The loop over the token's rows stops one short: its last row is never added.
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    if (begin == end) return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int i = begin; i < end - 1; i++) acc += dx[(long long)order[i] * C + c];
        dwte[(long long)v * C + c] += acc;
    }
}
