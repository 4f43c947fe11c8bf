// A 128-thread tile (larger than a warp) of a 256-thread block: per-tile sums through shared memory.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void tile_sums(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ cg::block_tile_memory<256> scratch;
    cg::thread_block block = cg::this_thread_block(scratch);
    auto tile = cg::tiled_partition<128>(block);
    __shared__ float s[256];
    unsigned t = block.thread_rank();
    s[t] = x[blockIdx.x * 256 + t];
    tile.sync();
    if (tile.thread_rank() == 0) {
        float acc = 0.0f;
        for (int k = 0; k < 128; k++) acc += s[t + k];
        out[blockIdx.x * 2 + tile.meta_group_rank()] = acc;
    }
}
