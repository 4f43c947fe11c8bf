// Cooperative groups for the cudl emulator: thread_block, thread_block_tile<N> (N <= 32 on warp primitives,
// larger N as whole warps meeting at a counter), coalesced_threads(), labeled/binary_partition, cg::reduce,
// thread_group, and this_grid() (whose sync() is refused: blocks do not run concurrently here).
// Every sync and shuffle takes the caller's line (__builtin_LINE), so errors name the kernel's line.
#pragma once
#include "cudl_prelude.h"
#define CUDL_AT int line = __builtin_LINE(), const char* file = __builtin_FILE()
namespace cooperative_groups {
static inline unsigned __linear_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
static inline unsigned __block_size() { return blockDim.x * blockDim.y * blockDim.z; }
static inline unsigned __lane() { return __linear_tid() % 32; }
// The lane holding rank r among the set bits of mask.
static inline unsigned __nth_lane(unsigned mask, unsigned r) {
    for (unsigned l = 0; l < 32; l++)
        if (((mask >> l) & 1) && r-- == 0) return l;
    return 0;
}
// A warp operation on a value of any trivially copyable type, 8 bytes at a time.
template <class T> static inline T __shfl_any(int op, unsigned mask, const T& v, int arg, int width, int line,
                                              const char* file) {
    static_assert(std::is_trivially_copyable<T>::value, "shuffled types must be trivially copyable");
    uint64_t chunk[(sizeof(T) + 7) / 8] = {};
    memcpy(chunk, &v, sizeof(T));
    for (auto& c : chunk) c = __cudl_warp(op, mask, c, arg, width, line, file);
    T r;
    memcpy(&r, chunk, sizeof(T));
    return r;
}

struct thread_group;
struct thread_block {
    void sync(CUDL_AT) const { __cudl_syncthreads(line, file); }
    unsigned thread_rank() const { return __linear_tid(); }
    unsigned size() const { return __block_size(); }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
    bool is_valid() const { return true; }
    operator thread_group() const;
};
template <unsigned MaxBlockSize = 1024, unsigned TileCommSize = 4, unsigned MaxTiles = 0> struct block_tile_memory {};
static inline thread_block this_thread_block() { return thread_block(); }
template <unsigned S, unsigned C, unsigned M> static inline thread_block this_thread_block(block_tile_memory<S, C, M>&) {
    return thread_block();
}

// Warps of one tile larger than 32 meet here: each thread counts its arrival, then its warp waits (a warp-wide
// vote, so all its lanes leave together) until the tile's count reaches this phase. State is per block.
static inline void __big_tile_sync(unsigned n, int line, const char* file) {
    static thread_local unsigned arrived[32], phase[1024];
    static thread_local uint3 owner{~0u, ~0u, ~0u};
    static thread_local void* owner_smem = nullptr;
    if (owner.x != blockIdx.x || owner.y != blockIdx.y || owner.z != blockIdx.z || owner_smem != __cudl_dynamic_smem()) {
        memset(arrived, 0, sizeof arrived);
        memset(phase, 0, sizeof phase);
        owner = blockIdx;
        owner_smem = __cudl_dynamic_smem();
    }
    unsigned me = __linear_tid(), t = me / n, target = ++phase[me] * n;
    arrived[t]++;
    while (!__cudl_warp(CUDL_ALL, 0xffffffffu, arrived[t] >= target, 0, 32, line, file)) {}
}

template <unsigned N, class Parent = void> struct thread_block_tile {
    static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0, "tile sizes are powers of 2");
    thread_block_tile() = default;
    template <class P> thread_block_tile(const thread_block_tile<N, P>&) {}
    unsigned mask() const {
        return N >= 32 ? 0xffffffffu : (unsigned)(((1ull << N) - 1) << (__lane() / N * N));
    }
    unsigned thread_rank() const { return __linear_tid() % N; }
    unsigned size() const { return N; }
    unsigned num_threads() const { return N; }
    unsigned meta_group_rank() const { return __linear_tid() / N; }
    unsigned meta_group_size() const { return (__block_size() + N - 1) / N; }
    bool is_valid() const { return true; }
    void sync(CUDL_AT) const {
        if (N > 32) __big_tile_sync(N, line, file);
        else __cudl_warp(CUDL_SYNCWARP, mask(), 0, 0, 32, line, file);
    }
    template <class T> T shfl(const T& v, int src, CUDL_AT) const { return op(CUDL_SHFL_IDX, v, src, line, file); }
    template <class T> T shfl_down(const T& v, unsigned d, CUDL_AT) const { return op(CUDL_SHFL_DOWN, v, d, line, file); }
    template <class T> T shfl_up(const T& v, unsigned d, CUDL_AT) const { return op(CUDL_SHFL_UP, v, d, line, file); }
    template <class T> T shfl_xor(const T& v, unsigned m, CUDL_AT) const { return op(CUDL_SHFL_XOR, v, m, line, file); }
    unsigned ballot(int p, CUDL_AT) const {
        return (unsigned)__cudl_warp(CUDL_BALLOT, mask(), p != 0, 0, 32, line, file) >> (__lane() / N * N % 32);
    }
    int any(int p, CUDL_AT) const { return (int)__cudl_warp(CUDL_ANY, mask(), p != 0, 0, 32, line, file); }
    int all(int p, CUDL_AT) const { return (int)__cudl_warp(CUDL_ALL, mask(), p != 0, 0, 32, line, file); }
    template <class T> unsigned match_any(T v, CUDL_AT) const {
        return (unsigned)__cudl_warp(CUDL_MATCH_ANY, mask(), __cudl_bits(v), 0, 32, line, file) >> (__lane() / N * N % 32);
    }
    operator thread_group() const;

  private:
    template <class T> T op(int o, const T& v, int arg, int line, const char* file) const {
        static_assert(N <= 32, "shuffles need a tile of at most 32 threads");
        return __shfl_any(o, mask(), v, arg, N, line, file);
    }
};
template <unsigned N, class Parent> static inline thread_block_tile<N, Parent> tiled_partition(const Parent&) {
    return thread_block_tile<N, Parent>();
}

// The active lanes of a warp (coalesced_threads(), labeled_partition, binary_partition); ranks count set bits.
struct coalesced_group {
    unsigned m;
    explicit coalesced_group(unsigned mask) : m(mask) {}
    unsigned thread_rank() const { return __popc(m & ((1u << __lane()) - 1)); }
    unsigned size() const { return __popc(m); }
    unsigned num_threads() const { return size(); }
    unsigned meta_group_rank() const { return 0; }
    unsigned meta_group_size() const { return 1; }
    bool is_valid() const { return m != 0; }
    void sync(CUDL_AT) const { __cudl_warp(CUDL_SYNCWARP, m, 0, 0, 32, line, file); }
    template <class T> T shfl(const T& v, unsigned rank, CUDL_AT) const {
        return __shfl_any(CUDL_SHFL_IDX, m, v, (int)__nth_lane(m, rank % size()), 32, line, file);
    }
    template <class T> T shfl_down(const T& v, unsigned d, CUDL_AT) const {
        unsigned r = thread_rank() + d;
        return __shfl_any(CUDL_SHFL_IDX, m, v, (int)(r < size() ? __nth_lane(m, r) : __lane()), 32, line, file);
    }
    template <class T> T shfl_up(const T& v, unsigned d, CUDL_AT) const {
        unsigned r = thread_rank();
        return __shfl_any(CUDL_SHFL_IDX, m, v, (int)(r >= d ? __nth_lane(m, r - d) : __lane()), 32, line, file);
    }
    unsigned ballot(int p, CUDL_AT) const {  // bit k: the thread of rank k
        unsigned b = (unsigned)__cudl_warp(CUDL_BALLOT, m, p != 0, 0, 32, line, file), out = 0, k = 0;
        for (unsigned l = 0; l < 32; l++)
            if ((m >> l) & 1) out |= ((b >> l) & 1u) << k++;
        return out;
    }
    int any(int p, CUDL_AT) const { return (int)__cudl_warp(CUDL_ANY, m, p != 0, 0, 32, line, file); }
    int all(int p, CUDL_AT) const { return (int)__cudl_warp(CUDL_ALL, m, p != 0, 0, 32, line, file); }
    operator thread_group() const;
};
static inline coalesced_group coalesced_threads(CUDL_AT) {
    return coalesced_group((unsigned)__cudl_warp(CUDL_ACTIVEMASK, 0, 0, 0, 32, line, file));
}
template <unsigned N, class P> static inline unsigned __mask_of(const thread_block_tile<N, P>& g) { return g.mask(); }
static inline unsigned __mask_of(const coalesced_group& g) { return g.m; }
static inline unsigned __mask_of(const thread_block&) { return 0xffffffffu; }
template <class G, class L> static inline coalesced_group labeled_partition(const G& g, L label, CUDL_AT) {
    return coalesced_group((unsigned)__cudl_warp(CUDL_MATCH_ANY, __mask_of(g), __cudl_bits(label), 0, 32, line, file));
}
template <class G> static inline coalesced_group binary_partition(const G& g, bool pred, CUDL_AT) {
    unsigned b = (unsigned)__cudl_warp(CUDL_BALLOT, __mask_of(g), pred, 0, 32, line, file);
    return coalesced_group(__mask_of(g) & (pred ? b : ~b));
}

// Any group, chosen at run time (thread_group g = cg::tiled_partition(block, 16)).
struct thread_group {
    unsigned kind, n, m;  // kind 0: the block; 1: a tile or coalesced group of one warp (lanes m)
    unsigned thread_rank() const { return kind == 0 ? __linear_tid() : __popc(m & ((1u << __lane()) - 1)); }
    unsigned size() const { return kind == 0 ? __block_size() : n; }
    unsigned num_threads() const { return size(); }
    bool is_valid() const { return true; }
    void sync(CUDL_AT) const {
        if (kind == 0) __cudl_syncthreads(line, file);
        else if (n > 32) __big_tile_sync(n, line, file);
        else __cudl_warp(CUDL_SYNCWARP, m, 0, 0, 32, line, file);
    }
};
inline thread_block::operator thread_group() const { return thread_group{0, 0, 0}; }
template <unsigned N, class P> inline thread_block_tile<N, P>::operator thread_group() const {
    return thread_group{1, N, mask()};
}
inline coalesced_group::operator thread_group() const { return thread_group{1, size(), m}; }
static inline thread_group tiled_partition(const thread_group& parent, unsigned n) {
    if (n == 0 || (n & (n - 1)) || n > parent.size()) __cudl_rt_trap("tiled_partition: bad tile size", __FILE__, __LINE__);
    unsigned m = n >= 32 ? 0xffffffffu : (unsigned)(((1ull << n) - 1) << (__lane() / n * n));
    return thread_group{1, n, m};
}

// The grid: its facts work; sync() needs every block running at once, which the emulator does not do.
struct grid_group {
    void sync(CUDL_AT) const {
        __cudl_rt_trap("not supported on the CPU emulator: cooperative-groups grid sync", file, line);
    }
    bool is_valid() const { return true; }
    unsigned long long thread_rank() const {
        return block_rank() * __block_size() + __linear_tid();
    }
    unsigned long long block_rank() const {
        return blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    }
    unsigned long long size() const { return num_blocks() * __block_size(); }
    unsigned long long num_threads() const { return size(); }
    unsigned long long num_blocks() const { return (unsigned long long)gridDim.x * gridDim.y * gridDim.z; }
    dim3 group_dim() const { return gridDim; }
    dim3 dim_blocks() const { return gridDim; }
    dim3 block_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
};
static inline grid_group this_grid() { return grid_group(); }

template <class G> static inline void sync(const G& g, CUDL_AT) { g.sync(line, file); }
template <class G> static inline unsigned long long thread_rank(const G& g) { return g.thread_rank(); }
template <class G> static inline unsigned long long group_size(const G& g) { return g.size(); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
// Every lane of a tile gets the reduction (butterfly over shfl_xor).
template <unsigned N, class P, class T, class Op>
static inline T reduce(const thread_block_tile<N, P>& g, T v, Op op, CUDL_AT) {
    for (unsigned off = N / 2; off > 0; off /= 2) v = op(v, g.shfl_xor(v, off, line, file));
    return v;
}
// A coalesced group: each lane folds the values of all ranks, in rank order.
template <class T, class Op> static inline T reduce(const coalesced_group& g, T v, Op op, CUDL_AT) {
    T acc = g.shfl(v, 0, line, file);
    for (unsigned r = 1; r < g.size(); r++) acc = op(acc, g.shfl(v, r, line, file));
    return acc;
}
// Scans over a tile or coalesced group (cooperative_groups/scan.h): ranks in order.
template <class G, class T, class Op> static inline T inclusive_scan(const G& g, T v, Op op, CUDL_AT) {
    T acc = g.shfl(v, 0, line, file);
    unsigned me = g.thread_rank();
    for (unsigned r = 1; r < g.size(); r++) {
        T x = g.shfl(v, r, line, file);
        if (r <= me) acc = op(acc, x);
    }
    return acc;
}
template <class G, class T> static inline T inclusive_scan(const G& g, T v, CUDL_AT) {
    return inclusive_scan(g, v, plus<T>(), line, file);
}
template <class G, class T, class Op> static inline T exclusive_scan(const G& g, T v, Op op, CUDL_AT) {
    T inc = inclusive_scan(g, v, op, line, file);
    T prev = g.shfl_up(inc, 1, line, file);
    return g.thread_rank() == 0 ? T() : prev;
}
template <class G, class T> static inline T exclusive_scan(const G& g, T v, CUDL_AT) {
    return exclusive_scan(g, v, plus<T>(), line, file);
}
}  // namespace cooperative_groups
#undef CUDL_AT
