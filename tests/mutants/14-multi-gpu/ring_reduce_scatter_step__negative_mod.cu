// mutant: C's % of a negative number is negative: chunk -1 lies before the row
extern "C" __global__ void ring_reduce_scatter_step(float* __restrict__ data, int ranks,
                                                    long long count, int step) {
    const int r = blockIdx.y;                        // the receiving rank
    const int prev = (r + ranks - 1) % ranks;        // its left neighbour, the sender
    const int c = (r - 1 - step) % ranks;  // C's % keeps the sign
    const long long begin = c * count / ranks, end = (c + 1) * count / ranks;
    float* mine = data + r * count;
    const float* theirs = data + prev * count;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < end;
         i += stride) {
        mine[i] += theirs[i];
    }
}
