// A double-precision axpby whose types come from typedefs (a scientific-code habit).
typedef double real;
typedef const real* __restrict__ in_ptr;
typedef real* __restrict__ out_ptr;

__global__ void axpby(real alpha, in_ptr x, real beta, out_ptr y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + beta * y[i];
}
