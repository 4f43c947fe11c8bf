// The one-shot all-reduce in ONE launch: copy in, barrier, sum; no per-call host work.
//     out[i] = x_0[i] + ... + x_{world-1}[i]   (x_r: GPU r's input; out may be x)
// oneshot_reduce.cu needs three launches per call (a copy into the symmetric buffer,
// the handle's barrier, the sum), and the host picks which of two buffers a call
// uses: at small sizes those launches, not NVLink, set the time. Here every block
// does all three itself:
//  1. copy in: block b copies the elements it owns from x into a slot of the
//     symmetric buffers;
//  2. barrier, per block: block b tells block b of every peer "my part is written"
//     (a flag in the peer's flag buffer) and waits for the same word from each of
//     them. Block b only ever reads what the blocks b of the other GPUs wrote (the
//     same elements: ownership depends neither on n nor on the GPU), so it needs no
//     one else: no grid-wide barrier;
//  3. sum the owned elements over all GPUs in rank order (bitwise the same on every
//     GPU).
// Each GPU's buffer holds `world` slots of cap floats, slot r for GPU r's input, twice
// (two halves). Two ways to move the bytes, chosen by `push`:
//  pull (push = 0): GPU r writes its input into slot r of its OWN buffer; the sum
//       loads slot p from GPU p's buffer over NVLink (a load waits for its reply);
//  push (push = 1): GPU r writes its input into slot r of EVERY GPU's buffer (remote
//       stores are posted: nothing comes back), and the sum reads all slots locally.
// Either way each GPU moves (world - 1) x n floats over NVLink. Which half a call
// uses, and the value a flag must reach, come from a counter per block kept on the
// GPU (epoch[b], one more each call): the launch's arguments never change, so the
// call can be captured in a CUDA graph and replayed (the host issues nothing). The
// halves alternate: block b writes half h again two calls later, after it passed the
// next call's barrier, which no peer's block b reaches before it has finished this
// call's reads.
// Owner of element i: block (i / 4 / blockDim.x) % gridDim.x, for every n: the grid
// and block size must be the same on every GPU and in every call (oneshot_allreduce.py
// fixes them). buf[r], flag[r]: GPU r's data and flag buffers as mapped into this GPU
// (CUDA IPC through PyTorch's symmetric memory); flag buffers start at zero; up to 8
// GPUs.
#define MAX_WORLD 8

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

extern "C" __global__ void oneshot_fused(
    const float* x, float* out, long long n,
    const unsigned long long* __restrict__ buf,   // [world] buffers, 2 x world x cap
    const unsigned long long* __restrict__ flag,  // [world] flags, gridDim.x x 8 words
    unsigned int* __restrict__ epoch,             // [gridDim.x] calls made, per block
    int world, int rank, long long cap, int push) {
    const unsigned int e = epoch[blockIdx.x] + 1;  // this call's number for this block
    const long long half = (e & 1) * world * cap;
    // slot(g, r): GPU r's input as stored in GPU g's buffer, for this call
    auto slot = [&](int g, int r) {
        return reinterpret_cast<float*>(buf[g]) + half + r * cap;
    };
    const long long groups = (n + 3) / 4;  // groups of 4 floats, one thread each
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    // the float4 path needs x, out and the slots 16-byte aligned (cap: multiple of 64)
    const bool vec = ((reinterpret_cast<unsigned long long>(x) |
                       reinterpret_cast<unsigned long long>(out)) % 16) == 0;

    const int copies = push ? world : 1;  // pull: my own slot; push: my slot everywhere
    for (long long g = first; g < groups; g += stride) {  // 1. copy in
        if (vec && 4 * g + 3 < n) {
            const float4 v = reinterpret_cast<const float4*>(x)[g];
            for (int c = 0; c < copies; ++c)
                reinterpret_cast<float4*>(slot(push ? c : rank, rank))[g] = v;
        } else {
            for (long long i = 4 * g; i < n && i < 4 * g + 4; ++i)
                for (int c = 0; c < copies; ++c) slot(push ? c : rank, rank)[i] = x[i];
        }
    }
    __syncthreads();  // the block's copies come before thread t's flag (cumulative)
    if (threadIdx.x < world && threadIdx.x != rank) {  // 2. one thread per peer
        const int peer = threadIdx.x;
        volatile unsigned int* theirs =
            reinterpret_cast<unsigned int*>(flag[peer]) + blockIdx.x * MAX_WORLD + rank;
        volatile unsigned int* ours =
            reinterpret_cast<unsigned int*>(flag[rank]) + blockIdx.x * MAX_WORLD + peer;
        __threadfence_system();  // my block's copies are visible before the peer sees e
        *theirs = e;
        while ((int)(*ours - e) < 0) {  // the peer's block has written (wraps safely)
        }
        __threadfence_system();  // and its part is read only after its flag was seen
    }
    __syncthreads();

    for (long long g = first; g < groups; g += stride) {  // 3. sum in rank order
        if (vec && 4 * g + 3 < n) {
            float4 v[MAX_WORLD];
#pragma unroll
            for (int r = 0; r < MAX_WORLD; ++r)  // every load first: `world` in flight
                if (r < world) {  // pull: GPU r's buffer over NVLink; push: my own
                    const float* from = slot(push ? rank : r, r);
                    v[r] = __ldcg(reinterpret_cast<const float4*>(from) + g);
                }
            float4 s = v[0];
#pragma unroll
            for (int r = 1; r < MAX_WORLD; ++r)
                if (r < world) s = add4(s, v[r]);
            reinterpret_cast<float4*>(out)[g] = s;
        } else {
            for (long long i = 4 * g; i < n && i < 4 * g + 4; ++i) {
                float s = __ldcg(slot(push ? rank : 0, 0) + i);
                for (int r = 1; r < world; ++r) s += __ldcg(slot(push ? rank : r, r) + i);
                out[i] = s;
            }
        }
    }
    if (threadIdx.x == 0) epoch[blockIdx.x] = e;
}
