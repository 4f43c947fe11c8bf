// Arithmetic intensity: each element is read once (4 B), passed through `iters` dependent
// multiply-adds (2 FLOP each) and written once (4 B): 2 x iters / 8 FLOP per byte. Below
// the ridge point (peak FLOP/s / bandwidth) it should run at the copy bandwidth, above it
// at the FMA rate of the CUDA cores.
extern "C" __global__ void fma_intensity(const float* __restrict__ in,
                                         float* __restrict__ out, int n, int iters,
                                         float a, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = in[i];
#pragma unroll 8  // fewer loop-counter instructions between the FMAs
    for (int k = 0; k < iters; ++k) x = fmaf(x, a, b);
    out[i] = x;
}
