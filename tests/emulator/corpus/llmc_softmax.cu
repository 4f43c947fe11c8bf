// Online softmax, one warp per row, max and sum with cg::reduce (llm.c style; no INFINITY macro,
// which NVRTC does not define).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__global__ void softmax_forward_kernel7(float* out, const float* inp, int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (idx >= N) return;
    const float* x = inp + idx * C;
    float maxval = __int_as_float(0xff800000), sumval = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        float m = fmaxf(maxval, x[i]);
        sumval = sumval * expf(maxval - m) + expf(x[i] - m);
        maxval = m;
    }
    float offset = cg::reduce(warp, maxval, cg::greater<float>{});
    sumval *= expf(maxval - offset);
    float sum = cg::reduce(warp, sumval, cg::plus<float>{});
    for (int i = warp.thread_rank(); i < C; i += warp.size()) out[idx * C + i] = expf(x[i] - offset) / sum;
}
