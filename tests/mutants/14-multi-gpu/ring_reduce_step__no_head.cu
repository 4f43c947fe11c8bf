// grader-test: emulator-needs alignment
// Mutant: no scalar head: the float4 body starts at acc + offset, which is 16-byte aligned only when
// offset is a multiple of 4 (a misaligned-address fault on a GPU at offsets 1, 3, 5)
extern "C" __global__ void ring_reduce_step(float* __restrict__ acc,
                                            const float* __restrict__ recv,
                                            long long offset, long long len) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // head: the floats before the first 16-byte boundary at or after acc + offset
    const long long head = 0;  // no head: start at offset, aligned or not
    const long long start = offset + head;  // a multiple of 4: acc + start is 16-byte aligned
    const long long n4 = (len - head) / 4;
    float4* acc4 = reinterpret_cast<float4*>(acc + start);
    const float4* recv4 = reinterpret_cast<const float4*>(recv + start);
    for (long long i = t; i < n4; i += stride) {
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
