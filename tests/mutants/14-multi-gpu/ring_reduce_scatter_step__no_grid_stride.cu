// Mutant: one element per thread, no grid-stride loop: a chunk longer than the 64 x 256 threads of
// a rank keeps its tail unreduced
extern "C" __global__ void ring_reduce_scatter_step(float* __restrict__ data, int ranks,
                                                    long long count, int step) {
    const int r = blockIdx.y;                        // the receiving rank
    const int prev = (r + ranks - 1) % ranks;        // its left neighbour, the sender
    const int c = ((r - 1 - step) % ranks + ranks) % ranks;  // C's % keeps the sign
    const long long begin = c * count / ranks, end = (c + 1) * count / ranks;
    float* mine = data + r * count;
    const float* theirs = data + prev * count;
    const long long i = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < end) mine[i] += theirs[i];
}
