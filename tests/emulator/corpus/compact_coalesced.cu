// Stream compaction with a warp-aggregated atomic over cg::coalesced_threads().
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ int atomicAggInc(int *ctr) {
    cg::coalesced_group active = cg::coalesced_threads();
    int prev;
    if (active.thread_rank() == 0) prev = atomicAdd(ctr, active.size());
    prev = active.shfl(prev, 0);
    return prev + active.thread_rank();
}

__global__ void filter_positive(const float *src, float *dst, int *nres, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n && src[i] > 0) dst[atomicAggInc(nres)] = src[i];
}
