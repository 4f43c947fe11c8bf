// vector_add, version 3: grid-stride loop over float4 (16-byte) loads and stores, so each
// thread issues a quarter of the memory instructions and index arithmetic of version 2
// for the same bytes.
// Limit: memory-bound, 12 bytes per element; target >= 85% of the measured copy bandwidth
// at 2^26 floats.
// Launch: any grid works; the fastest is one thread per group of four, ceil(n / 4 /
// threads) blocks, so that the loop runs once per thread (one wave of long-running blocks
// is a little slower: see the chapter).
// Needs x, y and out 16-byte aligned: every CuPy/PyTorch/cudl allocation is (256 bytes),
// a slice such as x[1:] is not. The last n % 4 elements are done one float at a time.
extern "C" __global__ void vector_add_float4(const float* __restrict__ x,
                                             const float* __restrict__ y,
                                             float* __restrict__ out, int n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n4 = n / 4;  // whole groups of 4 floats
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (long long i = first; i < n4; i += stride) {
        float4 a = x4[i];
        float4 b = y4[i];
        out4[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
    // the tail: at most 3 elements
    for (long long i = 4 * n4 + first; i < n; i += stride) {
        out[i] = x[i] + y[i];
    }
}
