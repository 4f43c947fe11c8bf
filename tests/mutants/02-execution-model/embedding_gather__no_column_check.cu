// Mutant: no check of c < dim: the threads past the end of a row write into the next row (and past the end of out).
extern "C" __global__ void embedding_gather(const float* __restrict__ table, const int* __restrict__ idx,
                                            float* __restrict__ out, int n_idx, int dim) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (r < n_idx) out[(long long)r * dim + c] = table[(long long)idx[r] * dim + c];
}
