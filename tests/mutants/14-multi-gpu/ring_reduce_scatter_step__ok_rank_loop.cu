// Correct, another style: the chunk's bounds from 64-bit products, the previous rank by a branch,
// and the grid-stride loop written over the offset inside the chunk
extern "C" __global__ void ring_reduce_scatter_step(float* __restrict__ data, int ranks,
                                                    long long count, int step) {
    const int r = blockIdx.y;
    const int prev = r == 0 ? ranks - 1 : r - 1;
    int c = (r - 1 - step) % ranks;
    if (c < 0) c += ranks;
    const long long begin = (long long)c * count / ranks;
    const long long size = (long long)(c + 1) * count / ranks - begin;
    float* dst = data + (long long)r * count + begin;
    const float* src = data + (long long)prev * count + begin;
    for (long long j = (long long)threadIdx.x + (long long)blockIdx.x * blockDim.x; j < size;
         j += (long long)blockDim.x * gridDim.x)
        dst[j] += src[j];
}
