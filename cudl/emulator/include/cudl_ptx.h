// The PTX of the Tensor Core chapters for the cudl emulator: mma.sync, ldmatrix, movmatrix (warp-collective,
// with the fragment layouts of the PTX ISA), cp.async (deferred copies), shared-window addresses.
// cudl/emulator/ptx.py turns each inline `asm` statement into calls of the functions below.
//
// Warp-collective operations: every lane writes its registers into a per-warp staging area, the warp meets
// (the runtime's __syncwarp rendezvous, which also reports lanes that never arrive), every lane computes its
// own output registers from the whole staged tile, and the warp meets again before the area is reused.
// Rounding model of mma: f16/bf16 products are exact in float; they are added to the f32 accumulator one k at
// a time, in float (round to nearest even); an f16 accumulator is converted from float once at the end.
// Integer mma is exact (wrapping int32; .satfinite clamps).
#pragma once
#include <vector>

// ------------------------------------------------------------------ shared-window addresses
// On a GPU a shared-memory address is a 32-bit offset into the block's shared window. Here shared memory lives
// in ordinary (64-bit) memory, so a 32-bit handle stands for it: (slot << 24) | low 24 bits of the pointer,
// where slot names a 16 MiB-aligned chunk. Chunks come in pairs (c, c + 1), so arithmetic on a handle that
// crosses into the next chunk stays valid (a shared array is far smaller than 16 MiB).
static thread_local uintptr_t __cudl_smem_chunks[256];  // slot -> chunk base (slot 0 unused)
static thread_local unsigned __cudl_smem_next = 1;
static inline size_t __cvta_generic_to_shared(const void* p) {
    uintptr_t a = (uintptr_t)p, chunk = a & ~(uintptr_t)0xffffff;
    unsigned slot = 0;
    for (unsigned s = 1; s < 255 && !slot; s += 2)
        if (__cudl_smem_chunks[s] == chunk) slot = s;
        else if (__cudl_smem_chunks[s + 1] == chunk) slot = s + 1;
    if (!slot) {
        slot = __cudl_smem_next;
        __cudl_smem_next = __cudl_smem_next >= 253 ? 1 : __cudl_smem_next + 2;  // oldest pair reused
        __cudl_smem_chunks[slot] = chunk;
        __cudl_smem_chunks[slot + 1] = chunk + 0x1000000;
    }
    return ((size_t)slot << 24) | (a & 0xffffff);
}
// A shared address as PTX sees it (a handle, or a generic pointer that some code passes) -> a pointer.
static inline char* __cudl_smem_ptr(uint64_t v) {
    if (v >= (1u << 24) && v < (1ull << 32)) {
        uintptr_t base = __cudl_smem_chunks[v >> 24];
        if (!base) __cudl_rt_trap("shared-memory address not made by __cvta_generic_to_shared", __FILE__, __LINE__);
        return (char*)(base + (v & 0xffffff));
    }
    return (char*)(uintptr_t)v;
}
static inline void* __cvta_shared_to_generic(size_t a) { return __cudl_smem_ptr(a); }
static inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }

// ------------------------------------------------------------------ asm operands (see ptx.py)
// An operand's bits as PTX sees them ("r": 32 bits, "l": 64 bits, "f": the float's bits), and back.
template <class T> static inline uint64_t __cudl_ptx_in(const T& v) {
    if constexpr (std::is_pointer<T>::value) return (uint64_t)(uintptr_t)v;
    else if constexpr (std::is_integral<T>::value || std::is_enum<T>::value)
        return sizeof(T) == 8 ? (uint64_t)v : (uint64_t)(uint32_t)v;
    else {
        static_assert(sizeof(T) <= 8, "an asm operand has at most 8 bytes");
        uint64_t b = 0;
        memcpy(&b, &v, sizeof(T));
        return b;
    }
}
template <class T> static inline void __cudl_ptx_out(T& x, uint64_t b) {
    if constexpr (std::is_integral<T>::value) x = (T)b;
    else memcpy(&x, &b, sizeof(T));
}

// ------------------------------------------------------------------ warp staging and rendezvous
enum { CUDL_PTX_REGS = 10 };  // registers a lane stages (the last: its call site)
static thread_local uint64_t __cudl_ptx_stage[32][32][CUDL_PTX_REGS];  // [warp][lane][register]
static inline unsigned __cudl_ptx_lin() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

// Stage this lane's n values, meet the warp; returns the warp's staging area. All lanes of the warp must come.
static inline uint64_t (*__cudl_ptx_meet(const uint64_t* mine, int n, const char* what, const char* file,
                                         int line))[CUDL_PTX_REGS] {
    unsigned lin = __cudl_ptx_lin(), w = lin / 32, nthreads = blockDim.x * blockDim.y * blockDim.z;
    unsigned lanes = nthreads - w * 32 >= 32 ? 32 : nthreads - w * 32;
    uint64_t(*st)[CUDL_PTX_REGS] = __cudl_ptx_stage[w];
    for (int i = 0; i < n; i++) st[lin % 32][i] = mine[i];
    uint64_t site = (uint64_t)line;  // the call site: line and a hash of the file name
    for (const char* c = file; *c; c++) site = (site ^ (unsigned char)*c) * 0x100000001b3ull;
    st[lin % 32][CUDL_PTX_REGS - 1] = site;
    unsigned got = (unsigned)__cudl_warp(CUDL_BALLOT, 0xffffffffu, 1, 0, 32, line, file);
    char msg[200] = "";
    if (lanes < 32 || got != 0xffffffffu)
        snprintf(msg, sizeof msg, "%s executed by lanes 0x%08x of warp %u only (it needs all 32 lanes)",
                 what, got, w);
    for (unsigned l = 0; l < 32 && !msg[0]; l++)
        if (st[l][CUDL_PTX_REGS - 1] != st[lin % 32][CUDL_PTX_REGS - 1])
            snprintf(msg, sizeof msg, "%s: lanes of warp %u met here from different asm statements "
                     "(a warp-collective instruction in divergent code?)", what, w);
    if (msg[0]) __cudl_rt_trap(strdup(msg), file, line);
    return st;
}
static inline void __cudl_ptx_leave(const char* file, int line) {
    (void)__cudl_warp(CUDL_SYNCWARP, 0xffffffffu, 0, 0, 32, line, file);
}

// ------------------------------------------------------------------ mma.sync
enum { CUDL_F16, CUDL_BF16, CUDL_F32, CUDL_S8, CUDL_U8, CUDL_S32 };
static inline int __cudl_ptx_per_reg(int t) { return t == CUDL_F16 || t == CUDL_BF16 ? 2 : t <= CUDL_F32 ? 1 : 4; }
// Element `sub` of a 32-bit register holding values of type t, as double (exact for every type here).
static inline double __cudl_ptx_elem(uint32_t r, int t, int sub) {
    switch (t) {
        case CUDL_F16: return __cudl_h2f_bits((unsigned short)(r >> (16 * sub)));
        case CUDL_BF16: return __cudl_bf2f_bits((unsigned short)(r >> (16 * sub)));
        case CUDL_F32: return __cudl_u2f(r);
        case CUDL_S8: return (double)(int8_t)(r >> (8 * sub));
        case CUDL_U8: return (double)(uint8_t)(r >> (8 * sub));
        default: return (double)(int32_t)r;
    }
}
// D = A * B + C for one lane. A is m x k (row), B is k x n8 (col), C/D m x 8; registers in the order of the
// PTX operands: a[na], b[nb], c[nc]. Layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"), with
// g = lane / 4, t = lane % 4 and E elements per register:
//   A(r, k): lane g*4 + (k % 4E) / E of row r % 8, register (k / 4E) * (m / 8) + r / 8, element k % E
//   B(k, n): lane n*4 + (k % 4E) / E, register k / 4E, element k % E
//   C(r, c): lane (r % 8)*4 + c / 2; 32-bit types: register (r / 8)*2 + c % 2; f16: register r / 8, element c % 2
static inline void __cudl_mma(uint32_t* d, const uint32_t* a, int na, const uint32_t* b, int nb,
                              const uint32_t* c, int m, int k, int ta, int tb, int tc, int td, bool satf,
                              const char* file, int line) {
    uint64_t mine[CUDL_PTX_REGS];
    for (int i = 0; i < na; i++) mine[i] = a[i];
    for (int i = 0; i < nb; i++) mine[na + i] = b[i];
    uint64_t(*st)[CUDL_PTX_REGS] = __cudl_ptx_meet(mine, na + nb, "mma.sync", file, line);
    unsigned lane = __cudl_ptx_lin() % 32;
    int ea = __cudl_ptx_per_reg(ta), eb = __cudl_ptx_per_reg(tb), nd = m * 8 / 32;
    bool half_acc = td == CUDL_F16;
    for (int i = 0; i < nd; i++) {  // this lane's outputs
        int r = (int)(lane / 4) + (i / 2) * 8, col = (int)(lane % 4) * 2 + i % 2;
        double cv = tc == CUDL_F16 ? __cudl_ptx_elem(c[i / 2], CUDL_F16, i % 2) : __cudl_ptx_elem(c[i], tc, 0);
        float facc = (float)cv;
        int64_t iacc = ta >= CUDL_S8 ? (int32_t)c[i] : 0;
        for (int kk = 0; kk < k; kk++) {
            unsigned la = (unsigned)((r % 8) * 4 + (kk % (4 * ea)) / ea);
            unsigned lb = (unsigned)(col * 4 + (kk % (4 * eb)) / eb);
            double av = __cudl_ptx_elem((uint32_t)st[la][(kk / (4 * ea)) * (m / 8) + r / 8], ta, kk % ea);
            double bv = __cudl_ptx_elem((uint32_t)st[lb][na + kk / (4 * eb)], tb, kk % eb);
            if (ta >= CUDL_S8) iacc += (int64_t)av * (int64_t)bv;
            else facc += (float)av * (float)bv;  // exact product, one float rounding per addition
        }
        if (ta >= CUDL_S8) {
            if (satf) iacc = iacc > INT32_MAX ? INT32_MAX : iacc < INT32_MIN ? INT32_MIN : iacc;
            d[i] = (uint32_t)(int32_t)(uint32_t)(uint64_t)iacc;
        } else if (half_acc) {
            unsigned short h = __cudl_f2h_bits(facc);
            d[i / 2] = (i % 2) ? (d[i / 2] & 0xffffu) | ((uint32_t)h << 16) : (d[i / 2] & 0xffff0000u) | h;
        } else {
            d[i] = __cudl_f2u(facc);
        }
    }
    __cudl_ptx_leave(file, line);
}

// ------------------------------------------------------------------ ldmatrix, movmatrix
// ldmatrix .m8n8 .b16: matrix j (of num) takes its 8 row addresses from lanes 8j..8j+7; lane L receives in
// register j the elements (L / 4, 2 (L % 4) + e), e = 0, 1, of matrix j; with .trans, elements (2 (L % 4) + e, L / 4).
// ldmatrix: lane L supplies the address of row L % 8 of matrix L / 8; the hardware reads each such row as one
// 16-byte access, 8 rows (128 bytes) per phase. The counters (check mode, -fsanitize=thread) see exactly
// that: one 16-byte read per supplying lane. The element reads that hand each lane its values (2 bytes from
// other lanes' rows) are not instrumented, so they neither count as requests nor enter the race check
// (which sees the same bytes through the 16-byte row reads).
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_read16(void*);
extern "C" void __tsan_read_range(void*, size_t);
extern "C" void __tsan_write_range(void*, size_t);
#define __CUDL_UNCOUNTED __attribute__((noinline, no_sanitize("thread")))
#else
#define __CUDL_UNCOUNTED
#endif
static __CUDL_UNCOUNTED uint32_t __cudl_ldmatrix_pair(const char* rowp, unsigned col, unsigned e) {
    unsigned short h;
    memcpy(&h, rowp + 2 * col, 2);
    return (uint32_t)h << (16 * e);
}
static inline void __cudl_ldmatrix(uint32_t* d, int num, bool trans, uint64_t addr, const char* file, int line) {
    if (__cudl_ptx_lin() % 32 < 8u * num) {  // this lane supplies a row address: 16 bytes, 16-byte aligned
        char* row = __cudl_smem_ptr(addr);
        if ((uintptr_t)row % 16) __cudl_rt_misaligned(row, "ldmatrix row read of 16 bytes", 16, 0, file, line);
#if defined(__SANITIZE_THREAD__)
        __tsan_read16(row);
#endif
    }
    uint64_t(*st)[CUDL_PTX_REGS] = __cudl_ptx_meet(&addr, 1, "ldmatrix", file, line);
    unsigned lane = __cudl_ptx_lin() % 32;
    for (int j = 0; j < num; j++) {
        uint32_t v = 0;
        for (int e = 0; e < 2; e++) {
            unsigned row = trans ? 2 * (lane % 4) + e : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + e;
            v |= __cudl_ldmatrix_pair(__cudl_smem_ptr(st[8 * j + row][0]), col, e);
        }
        d[j] = v;
    }
    __cudl_ptx_leave(file, line);
}
// movmatrix .m8n8.trans.b16: lane L holds (L / 4, 2 (L % 4) + e) of A and receives the same places of A^T.
static inline uint32_t __cudl_movmatrix(uint32_t a, const char* file, int line) {
    uint64_t mine = a;
    uint64_t(*st)[CUDL_PTX_REGS] = __cudl_ptx_meet(&mine, 1, "movmatrix", file, line);
    unsigned lane = __cudl_ptx_lin() % 32;
    uint32_t v = 0;
    for (int e = 0; e < 2; e++) {
        unsigned r = 2 * (lane % 4) + e, c = lane / 4;  // A^T(L/4, 2(L%4)+e) = A(r, c)
        v |= ((uint32_t)(st[r * 4 + c / 2][0] >> (16 * (c % 2))) & 0xffffu) << (16 * e);
    }
    __cudl_ptx_leave(file, line);
    return v;
}

// ------------------------------------------------------------------ cp.async
// Deferred like on the GPU: cp.async reads the source now and poisons the destination (0xff bytes: NaN in
// f16/f32), the copy lands when cp.async.wait_group / wait_all retires its group. A kernel that reads the
// tile before waiting sees NaN, as it may see stale data on a GPU. Pending copies are per thread. The race
// check sees the poisoning and the landing as writes by the issuing thread (a read by another thread that
// no __syncthreads() separates from them is a race), and the source read at issue.
struct __cudl_cp { char* dst; int n, group; unsigned char data[16]; };
static thread_local std::vector<__cudl_cp> __cudl_cp_q[1024];
static thread_local int __cudl_cp_group[1024];
static inline void __cudl_cp_reset() {  // at the start of every thread (prelude's entry points)
    unsigned lin = __cudl_ptx_lin();
    __cudl_cp_q[lin].clear();
    __cudl_cp_group[lin] = 0;
}
static inline void __cudl_cp_async(uint64_t dst_addr, const void* src, int n, int src_size, const char* file,
                                   int line) {
    if (n != 4 && n != 8 && n != 16) __cudl_rt_trap("cp.async copies 4, 8 or 16 bytes", file, line);
    unsigned lin = __cudl_ptx_lin();
    __cudl_cp e;
    e.dst = __cudl_smem_ptr(dst_addr);
    // Both addresses aligned to the copy size (PTX ISA, cp.async), or the GPU faults.
    static const char* what[2][3] = {{"cp.async of 4 bytes (its shared destination)", "cp.async of 8 bytes (its shared "
                                      "destination)", "cp.async of 16 bytes (its shared destination)"},
                                     {"cp.async of 4 bytes (its global source)", "cp.async of 8 bytes (its global "
                                      "source)", "cp.async of 16 bytes (its global source)"}};
    const int k = n == 4 ? 0 : n == 8 ? 1 : 2;
    if ((uintptr_t)e.dst % n) __cudl_rt_misaligned(e.dst, what[0][k], (unsigned)n, 1, file, line);
    if (src_size > 0 && (uintptr_t)src % n) __cudl_rt_misaligned(src, what[1][k], (unsigned)n, 0, file, line);
    e.n = n;
    e.group = __cudl_cp_group[lin];
    memset(e.data, 0, sizeof e.data);
    const size_t got = (size_t)(src_size < n ? src_size : n);
#if defined(__SANITIZE_THREAD__)
    if (src_size > 0) __tsan_read_range((void*)src, got);
    __tsan_write_range(e.dst, (size_t)n);
#endif
    if (src_size > 0) memcpy(e.data, src, got);  // the rest is zero-filled
    memset(e.dst, 0xff, (size_t)n);
    __cudl_cp_q[lin].push_back(e);
}
static inline void __cudl_cp_commit() { __cudl_cp_group[__cudl_ptx_lin()]++; }
// Complete every committed group but the newest `keep` (wait_all: every group, committed or not).
static inline void __cudl_cp_wait(int keep, bool all = false) {
    unsigned lin = __cudl_ptx_lin();
    int limit = all ? INT_MAX : __cudl_cp_group[lin] - keep;
    std::vector<__cudl_cp>& q = __cudl_cp_q[lin];
    size_t kept = 0;
    for (size_t i = 0; i < q.size(); i++)
        if (q[i].group < limit) {
#if defined(__SANITIZE_THREAD__)
            __tsan_write_range(q[i].dst, (size_t)q[i].n);
#endif
            memcpy(q[i].dst, q[i].data, (size_t)q[i].n);
        } else {
            q[kept++] = q[i];
        }
    q.resize(kept);
    CUDL_MEMBAR();
}
// The CUDA C++ wrappers of <cuda_pipeline.h> (zfill: bytes at the end of the copy that are zeroed).
static inline void __cudl_pipeline_memcpy_async(const char* file, int line, void* dst, const void* src, size_t n,
                                                size_t zfill = 0) {
    __cudl_cp_async((uint64_t)(uintptr_t)dst, src, (int)n, (int)(n - zfill), file, line);
}
#define __pipeline_memcpy_async(...) __cudl_pipeline_memcpy_async(__FILE__, __LINE__, __VA_ARGS__)
static inline void __pipeline_commit() { __cudl_cp_commit(); }
static inline void __pipeline_wait_prior(size_t prior) { __cudl_cp_wait((int)prior); }
