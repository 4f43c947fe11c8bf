// Mutant: a shared-memory tree whose last six steps rely on the lanes of warp 0 running in lockstep
// (pre-Volta "warp-synchronous" code: volatile, but no __syncwarp() between the steps). Since Volta the
// lanes may drift apart and read a neighbour's value before it was updated; the emulator's lanes do.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float s[256];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 128; stride > 32; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t < 32) {
        volatile float* v = s;
        v[t] += v[t + 32];
        v[t] += v[t + 16];
        v[t] += v[t + 8];
        v[t] += v[t + 4];
        v[t] += v[t + 2];
        v[t] += v[t + 1];
    }
    if (t == 0) partials[blockIdx.x] = s[0];
}
