// thread_ids: the first kernel of the book. Every thread writes down who it is (its
// block, its place in the block, and the global index it computes from them), so you can
// see how a launch is laid out.
// Limit: none worth measuring; it exists to be looked at.
extern "C" __global__ void thread_ids(int* __restrict__ block, int* __restrict__ thread,
                                      int* __restrict__ index, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's element
    if (i < n) {  // the last block may have more threads than elements left
        block[i] = blockIdx.x;
        thread[i] = threadIdx.x;
        index[i] = i;
    }
}
