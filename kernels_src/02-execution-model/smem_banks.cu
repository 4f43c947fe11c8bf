// Shared-memory banks: shared memory is 32 banks of 4-byte words (word w lives in bank w
// % 32), and each bank serves one word per cycle. A warp's load takes one pass unless
// several lanes want different words of one bank. Lane l reading word l x stride
// conflicts gcd(stride, 32)-way: predict time proportional to gcd(stride, 32), i.e. 1x at
// odd strides and 32x at stride 32, against a peak of 128 B per cycle per SM.
// (Some GPUs pay more than 32 passes for the 32-way case; the chapter measures it.)

#define LANES 32               // threads per warp = number of banks
// largest stride the buffer holds (stride 33 is the padding trick)
#define MAX_STRIDE 34
// lane 31 at stride 34 reads up to word 31 x 34 + 31 < 32 x 34
#define WORDS (LANES * MAX_STRIDE)

extern "C" __global__ void smem_read_stride(const unsigned int* __restrict__ in,
                                            unsigned int* __restrict__ out,
                                            int n, int stride, int rounds) {
    // volatile: every read below must really go to shared memory, rounds after round.
    volatile __shared__ unsigned int buf[WORDS];
    for (int w = threadIdx.x; w < WORDS; w += blockDim.x) buf[w] = in[w];
    __syncthreads();
    // bounds check: the output stays poisoned
    if (stride < 0 || stride > MAX_STRIDE) return;
    int base = (threadIdx.x % LANES) * stride;
    unsigned int acc = 0;
    for (int r = 0; r < rounds; ++r) {
#pragma unroll
        // all lanes shift by j together: same conflicts
        for (int j = 0; j < LANES; ++j) acc += buf[base + j];
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = acc;
}
