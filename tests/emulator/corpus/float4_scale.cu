// Vectorized loads and stores through float4 (n a multiple of 4).
__global__ void scale_float4(const float* __restrict__ in, float* __restrict__ out, float s, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i < n) {
        float4 v = reinterpret_cast<const float4*>(in)[i / 4];
        v.x *= s; v.y *= s; v.z *= s; v.w *= s;
        reinterpret_cast<float4*>(out)[i / 4] = v;
    }
}
