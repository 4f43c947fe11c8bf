// Correct, another style: one grid-stride loop over "slots" (the head's floats, then the float4
// groups, then the tail's floats), each slot deciding what it is, instead of three loops
extern "C" __global__ void ring_reduce_step(float* __restrict__ acc,
                                            const float* __restrict__ recv,
                                            long long offset, long long len) {
    const long long head = min((4 - offset % 4) % 4, len);
    const long long n4 = (len - head) / 4, tail = len - head - 4 * n4;
    const long long body = offset + head;  // a multiple of 4: 16-byte aligned
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < head + n4 + tail;
         s += (long long)gridDim.x * blockDim.x) {
        if (s < head) {
            acc[offset + s] += recv[offset + s];
        } else if (s < head + n4) {
            float4* a = reinterpret_cast<float4*>(acc + body) + (s - head);
            const float4 b = reinterpret_cast<const float4*>(recv + body)[s - head];
            float4 v = *a;
            v.x += b.x; v.y += b.y; v.z += b.z; v.w += b.w;
            *a = v;
        } else {
            const long long i = body + 4 * n4 + (s - head - n4);
            acc[i] += recv[i];
        }
    }
}
