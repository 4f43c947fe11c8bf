// An elementwise template over a functor type, instantiated by name expression.
struct Relu {
    template <typename T> __device__ T operator()(T x) const { return x > T(0) ? x : T(0); }
};
struct Square {
    template <typename T> __device__ T operator()(T x) const { return x * x; }
};

template <typename T, typename Op>
__global__ void apply(const T* __restrict__ in, T* __restrict__ out, int n) {
    Op op;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = op(in[i]);
}
