// Mutant: rounds x + bias to bf16 before adding the residual, so the result is rounded twice
__device__ __forceinline__ float bf16_bits_to_float(unsigned bits) {
    return __uint_as_float(bits << 16);  // a bf16 is the high half of an fp32
}
__device__ __forceinline__ unsigned float_to_bf16_bits(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN stays NaN
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
}

extern "C" __global__ void bias_add_residual(const unsigned short* __restrict__ x,
                                             const unsigned short* __restrict__ bias,
                                             const unsigned short* __restrict__ res,
                                             unsigned short* __restrict__ out, int rows, int cols) {
    const long long n = (long long)rows * cols;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // vector t: elements 8t..8t+7
    const long long e0 = 8 * t;
    if (e0 + 8 <= n) {
        const uint4 xv = reinterpret_cast<const uint4*>(x)[t];  // one 16-byte load each
        const uint4 rv = reinterpret_cast<const uint4*>(res)[t];
        const unsigned xw[4] = {xv.x, xv.y, xv.z, xv.w}, rw[4] = {rv.x, rv.y, rv.z, rv.w};
        unsigned o[4];
        int c = e0 % cols;  // the column of element e0; it wraps inside the vector
        for (int k = 0; k < 4; ++k) {
            const float lo = bf16_bits_to_float(float_to_bf16_bits(bf16_bits_to_float(xw[k] & 0xffffu) + bf16_bits_to_float(bias[c])))
                             + bf16_bits_to_float(rw[k] & 0xffffu);  // element 2k: the low half
            c = (c + 1 == cols) ? 0 : c + 1;
            const float hi = bf16_bits_to_float(float_to_bf16_bits(bf16_bits_to_float(xw[k] >> 16) + bf16_bits_to_float(bias[c])))
                             + bf16_bits_to_float(rw[k] >> 16);  // element 2k + 1: the high half
            c = (c + 1 == cols) ? 0 : c + 1;
            o[k] = float_to_bf16_bits(lo) | (float_to_bf16_bits(hi) << 16);
        }
        reinterpret_cast<uint4*>(out)[t] = make_uint4(o[0], o[1], o[2], o[3]);  // one 16-byte store
    } else {
        for (long long e = e0; e < n; ++e) {  // the tail: fewer than 8 elements, one at a time
            const float v = bf16_bits_to_float(float_to_bf16_bits(bf16_bits_to_float(x[e]) + bf16_bits_to_float(bias[e % cols])))
                            + bf16_bits_to_float(res[e]);
            out[e] = (unsigned short)float_to_bf16_bits(v);
        }
    }
}
