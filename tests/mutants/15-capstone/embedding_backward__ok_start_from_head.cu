// Correct, another order: the accumulator starts from the head's gradient and each row is added
// to it, in the sorted order (a fixed order, so the same bits at every run).
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dwte[(long long)v * C + c];
        for (int i = begin; i < end; i++) acc += dx[(long long)order[i] * C + c];
        dwte[(long long)v * C + c] = acc;
    }
}
