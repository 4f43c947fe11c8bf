// Minimal cooperative groups for the cudl emulator: thread_block, thread_block_tile<N> (N <= 32, from
// tiled_partition<N>) and cg::reduce. Grid-wide groups (this_grid, grid.sync) are refused at load time.
// Barrier errors raised through these functions name this header's line, not the kernel's.
#pragma once
#include "cudl_prelude.h"
namespace cooperative_groups {
static inline unsigned __linear_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
struct thread_block {
    void sync() const { __syncthreads(); }
    unsigned thread_rank() const { return __linear_tid(); }
    unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
};
static inline thread_block this_thread_block() { return thread_block(); }
static inline void sync(const thread_block& b) { b.sync(); }

template <unsigned N> struct thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tile sizes are powers of 2 up to 32");
    unsigned mask() const {
        unsigned lane = __linear_tid() % 32;
        return (unsigned)((N == 32 ? 0xffffffffull : ((1ull << N) - 1)) << (lane / N * N));
    }
    unsigned thread_rank() const { return __linear_tid() % N; }
    unsigned size() const { return N; }
    unsigned num_threads() const { return N; }
    unsigned meta_group_rank() const { return __linear_tid() / N; }
    unsigned meta_group_size() const { return (blockDim.x * blockDim.y * blockDim.z + N - 1) / N; }
    void sync() const { __syncwarp(mask()); }
    template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
    template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, N); }
    template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
    template <class T> T shfl_xor(T v, unsigned m) const { return __shfl_xor_sync(mask(), v, m, N); }
    unsigned ballot(int p) const { return __ballot_sync(mask(), p) >> (__linear_tid() % 32 / N * N); }
    int any(int p) const { return __any_sync(mask(), p); }
    int all(int p) const { return __all_sync(mask(), p); }
};
template <unsigned N, class Parent> static inline thread_block_tile<N> tiled_partition(const Parent&) {
    return thread_block_tile<N>();
}
template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
// Every lane of the tile gets the reduction (butterfly over shfl_xor).
template <unsigned N, class T, class Op> static inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
    for (unsigned off = N / 2; off > 0; off /= 2) v = op(v, g.shfl_xor(v, off));
    return v;
}
}  // namespace cooperative_groups
