// Mutant: the float4 loop rounds the group count up: the last group reads and writes past the end, and the tail is done again.
extern "C" __global__ void fma_float4(const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ z, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = gridDim.x * blockDim.x;  // threads in the grid
    const float4* x4 = reinterpret_cast<const float4*>(x);  // 16-byte aligned: one load per group
    const float4* y4 = reinterpret_cast<const float4*>(y);
    float4* z4 = reinterpret_cast<float4*>(z);
    for (int g = tid; g < (n + 3) / 4; g += stride) {
        float4 a = x4[g], b = y4[g], c = z4[g];
        c.x = fmaf(a.x, b.x, c.x);
        c.y = fmaf(a.y, b.y, c.y);
        c.z = fmaf(a.z, b.z, c.z);
        c.w = fmaf(a.w, b.w, c.w);
        z4[g] = c;
    }
    if (tid < n % 4) {  // the 0 to 3 elements after the last full group, one thread each
        int i = n / 4 * 4 + tid;
        z[i] = fmaf(x[i], y[i], z[i]);
    }
}