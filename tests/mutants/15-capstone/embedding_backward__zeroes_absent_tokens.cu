// A token absent from the batch gets its row set to zero, wiping the head's gradient there.
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (begin == end) { dwte[(long long)v * C + c] = 0.0f; continue; }
        float acc = 0.0f;
        for (int i = begin; i < end; i++) acc += dx[(long long)order[i] * C + c];
        dwte[(long long)v * C + c] += acc;
    }
}
