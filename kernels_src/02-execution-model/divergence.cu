// SIMT divergence: the 32 threads of a warp share one instruction stream, so when some
// take one branch and the rest the other, the warp runs both branches one after the other
// with part of its lanes switched off.
// branch_by_width sends groups of `width` consecutive threads down one of two paths: for
// width >= 32 every warp takes a single path, for width < 32 every warp takes both.
// Compute-bound (integer math, 8 B of memory traffic per thread), so predict 2x the time
// for width < 32 and no change from 32 upwards.

// Two integer recurrences with different instructions (so the compiler cannot merge the
// branches into one loop with selected constants). Integer math wraps modulo 2^32
// exactly, so NumPy can check the result bit for bit.
__device__ __forceinline__ unsigned int path_a(unsigned int h, int iters) {
    // LCG constants from Numerical Recipes
    for (int k = 0; k < iters; ++k) h = h * 1664525u + 1013904223u;
    return h;
}

__device__ __forceinline__ unsigned int path_b(unsigned int h, int iters) {
    // Knuth's multiplicative hash constant
    for (int k = 0; k < iters; ++k) h = (h ^ (h >> 15)) * 2654435761u;
    return h;
}

extern "C" __global__ void branch_by_width(const unsigned int* __restrict__ in,
                                           unsigned int* __restrict__ out,
                                           int n, int width, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || width < 1) return;
    unsigned int h = in[i];
    if ((i / width) % 2 == 0) {
        h = path_a(h, iters);
    } else {
        h = path_b(h, iters);
    }
    out[i] = h;
}
