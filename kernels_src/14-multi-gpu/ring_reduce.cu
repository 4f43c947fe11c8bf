// ring all-reduce, the reduction step: acc[i] += recv[i] over one slice of the ring.
// At every reduce-scatter step of the ring each GPU receives a slice that its left
// neighbour has summed so far and adds its own values to it; this kernel is that add.
// Over NCCL's send/recv (ring_allreduce.py's default transport) the slice has
// arrived in this GPU's memory; with its peer transport, recv points into the left
// neighbour's memory, mapped into this GPU's address space: its loads cross NVLink.
// Grid-stride loop over float4 (16-byte) loads and stores.
// Limit: memory-bound, 12 bytes per element (read acc and recv, write acc); expect
// >= 85% of the copy bandwidth. In the ring it should hide behind the link: an H100
// moves ~3 TB/s through HBM but at most 450 GB/s per direction over NVLink 4, so the
// add of one slice costs well under a tenth of that slice's transfer.
// Launch: any grid; ring_allreduce.py uses 4 blocks of 256 threads per SM.
// The float4 path needs acc and recv 16-byte aligned (the ring's slices start at
// multiples of 64 floats); otherwise the whole slice goes one float at a time.
extern "C" __global__ void ring_reduce_add(float* __restrict__ acc,
                                           const float* __restrict__ recv,
                                           long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(acc) |
                           reinterpret_cast<unsigned long long>(recv)) % 16) == 0;
    const long long n4 = aligned ? n / 4 : 0;  // whole groups of 4 floats
    float4* acc4 = reinterpret_cast<float4*>(acc);
    const float4* recv4 = reinterpret_cast<const float4*>(recv);
    for (long long i = first; i < n4; i += stride) {
        float4 a = acc4[i];
        const float4 b = recv4[i];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        acc4[i] = a;
    }
    // the tail (at most 3 elements), or everything when the pointers are not aligned
    for (long long i = 4 * n4 + first; i < n; i += stride) {
        acc[i] += recv[i];
    }
}
