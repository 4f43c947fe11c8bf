// The device-side data loader's gather: the batch is a list of int32 row indices (a
// random permutation, shuffled on the device) into a dataset that lives in GPU memory, so
// building a batch is one kernel and no host-to-device copy:
// gather_rows:   out[r, c] = data[index[r], c] for a batch x cols output (features);
// gather_labels: out[r] = labels[index[r]] (int32 targets).
// next_batch moves the loader's cursor on the device, so a captured CUDA graph can replay
// the step unchanged: it copies the batch's indices from `order` (the shuffled indices of
// every epoch, laid end to end, `steps` batches in all; it wraps around after the last)
// at offset (step % steps) * batch into `index`, then adds 1 to the step counter, which
// the optimizer reads next. One block: the __syncthreads() orders every thread's read of
// *step before thread 0 overwrites it. Launch: grid (1), block (256).
// (Chapter 2's embedding lookup exercise is the same gather; it lives in that exercise.)
// Indices are not checked: they must lie in [0, dataset rows).
// Limit: memory-bound, 8 bytes per element (read one float, write one); each row is a
// contiguous run of cols floats, so the reads stay coalesced within a row.
// Launch: block (256), grid-stride over batch x cols (or batch) elements:
// grid (min(ceil(elements / 256), 32 x SM count)).

extern "C" __global__ void gather_rows(const float* __restrict__ data,
                                       const int* __restrict__ index,
                                       float* __restrict__ out, int batch, int cols) {
    const long long n = static_cast<long long>(batch) * cols;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (long long i = first; i < n; i += stride) {
        const long long r = i / cols, c = i - r * cols;
        out[i] = data[static_cast<long long>(index[r]) * cols + c];
    }
}

extern "C" __global__ void gather_labels(const int* __restrict__ labels,
                                         const int* __restrict__ index,
                                         int* __restrict__ out, int batch) {
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < batch; i += stride)
        out[i] = labels[index[i]];
}

extern "C" __global__ void next_batch(const int* __restrict__ order,
                                      int* __restrict__ index, int* step, int batch,
                                      int steps) {
    const long long offset = static_cast<long long>(*step % steps) * batch;
    for (int i = threadIdx.x; i < batch; i += blockDim.x) index[i] = order[offset + i];
    __syncthreads();
    if (threadIdx.x == 0) *step += 1;
}
