// mutant: the float4 loop strides by blockDim.x: with several blocks, groups are added several times
extern "C" __global__ void ring_reduce_step(float* __restrict__ acc,
                                            const float* __restrict__ recv,
                                            long long offset, long long len) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // head: the floats before the first 16-byte boundary at or after acc + offset
    long long head = (4 - offset % 4) % 4;
    if (head > len) head = len;
    for (long long i = t; i < head; i += stride) acc[offset + i] += recv[offset + i];
    const long long start = offset + head;  // a multiple of 4: acc + start is 16-byte aligned
    const long long n4 = (len - head) / 4;
    float4* acc4 = reinterpret_cast<float4*>(acc + start);
    const float4* recv4 = reinterpret_cast<const float4*>(recv + start);
    for (long long i = t; i < n4; i += blockDim.x) {
        float4 a = acc4[i];
        const float4 b = recv4[i];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        acc4[i] = a;
    }
    // tail: at most 3 floats after the last whole float4
    for (long long i = start + 4 * n4 + t; i < offset + len; i += stride) acc[i] += recv[i];
}
