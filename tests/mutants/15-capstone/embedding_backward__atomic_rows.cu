// grader-test: emulator-needs schedule
// One thread per row of the token, each adding its row with atomicAdd: the right sum, but the
// additions happen in whatever order the threads arrive, so two runs differ in the last bits.
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    for (int i = begin + threadIdx.x; i < end; i += blockDim.x)
        for (int c = 0; c < C; c++)
            atomicAdd(&dwte[(long long)v * C + c], dx[(long long)order[i] * C + c]);
}
