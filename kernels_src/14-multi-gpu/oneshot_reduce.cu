// one-shot all-reduce, the whole collective in one kernel:
//     out[i] = in_0[i] + in_1[i] + ... + in_{world-1}[i]
// in_r is GPU r's input buffer. Every GPU runs this kernel at once and reads all `world`
// buffers itself, its peers' over NVLink (each peer's buffer is mapped into this GPU's
// address space through CUDA IPC: PyTorch's symmetric memory, see oneshot_allreduce.py).
// So the collective is one step, not the ring's 2(n-1): for small messages, where the
// latency of each step is the cost, that wins. But each GPU reads (n-1) x S bytes over
// its links instead of the ring's 2(n-1)/n x S, so large messages belong to the ring
// (the crossover is measured in oneshot_allreduce.py).
// Every GPU adds in the same order (rank 0 first): all GPUs hold bitwise the same sum.
// The caller puts a barrier before it: no GPU may read a buffer before its owner has
// written it, nor may a GPU overwrite its buffer while a peer still reads it.
// Limit: each thread keeps `world` 16-byte loads in flight (the loop over ranks is
// unrolled, its loads independent); a few blocks per SM cover NVLink's latency.
// Up to 8 GPUs (one NVLink node); unused pointer slots may repeat in0 and are never read.
// The float4 path needs every pointer 16-byte aligned; otherwise one float at a time.
#define MAX_WORLD 8

extern "C" __global__ void oneshot_sum(
    const float* __restrict__ in0, const float* __restrict__ in1,
    const float* __restrict__ in2, const float* __restrict__ in3,
    const float* __restrict__ in4, const float* __restrict__ in5,
    const float* __restrict__ in6, const float* __restrict__ in7,
    int world, float* __restrict__ out, long long n) {
    const float* in[MAX_WORLD] = {in0, in1, in2, in3, in4, in5, in6, in7};
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long bits = reinterpret_cast<unsigned long long>(out);
    for (int r = 0; r < world; ++r) bits |= reinterpret_cast<unsigned long long>(in[r]);
    const long long n4 = (bits % 16 == 0) ? n / 4 : 0;  // whole groups of 4 floats
    for (long long i = first; i < n4; i += stride) {
        float4 v[MAX_WORLD];
#pragma unroll
        for (int r = 0; r < MAX_WORLD; ++r)  // all loads first: `world` in flight
            if (r < world) v[r] = reinterpret_cast<const float4*>(in[r])[i];
        float4 s = v[0];
#pragma unroll
        for (int r = 1; r < MAX_WORLD; ++r) {
            if (r < world) {
                s.x += v[r].x;
                s.y += v[r].y;
                s.z += v[r].z;
                s.w += v[r].w;
            }
        }
        reinterpret_cast<float4*>(out)[i] = s;
    }
    // the tail (at most 3 elements), or everything when a pointer is not aligned
    for (long long i = 4 * n4 + first; i < n; i += stride) {
        float s = in[0][i];
        for (int r = 1; r < world; ++r) s += in[r][i];
        out[i] = s;
    }
}
