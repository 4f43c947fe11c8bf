// Mutant: the bound counts halves, not pairs: threads past the end read and write.
#include <cuda_fp16.h>

extern "C" __global__ void swiglu_half2(const __half* __restrict__ x, __half* __restrict__ out,
                                        int rows, int hidden) {
    int pairs_per_row = hidden / 2;  // of out; a row of x holds 2 * pairs_per_row pairs
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // this thread's output pair
    if (p >= (long long)rows * hidden) return;
    long long r = p / pairs_per_row, c = p % pairs_per_row;
    const __half2* x2 = reinterpret_cast<const __half2*>(x);
    float2 g = __half22float2(x2[r * hidden + c]);  // gates: the first half of row r
    float2 u = __half22float2(x2[r * hidden + pairs_per_row + c]);  // ups: the second half
    float2 y;
    y.x = g.x / (1.0f + expf(-g.x)) * u.x;  // silu(g) * u in fp32, rounded once below
    y.y = g.y / (1.0f + expf(-g.y)) * u.y;
    reinterpret_cast<__half2*>(out)[p] = __float22half2_rn(y);
}
