// Mutant: the token index is used as an element offset (idx[r] + c) instead of a row offset (idx[r] * dim + c).
extern "C" __global__ void embedding_gather(const float* __restrict__ table, const int* __restrict__ idx,
                                            float* __restrict__ out, int n_idx, int dim) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (r < n_idx && c < dim) out[(long long)r * dim + c] = table[idx[r] + c];
}
