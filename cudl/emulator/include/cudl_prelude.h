// cudl_prelude.h: CUDA C as C++17 on the CPU, for the cudl emulator (cudl/emulator/__init__.py).
// Every kernel source is compiled as `#include "cudl_prelude.h"` + the source + generated entry points.
// The runtime (scheduler, fibers, barriers, warp rendezvous, fault handler) lives in runtime.cpp,
// compiled once into its own shared library; the functions named __cudl_rt_* below are defined there.
#pragma once
#ifndef CUDL_PRELUDE_H
#define CUDL_PRELUDE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <float.h>
#include <limits.h>
#include <utility>
#include <tuple>
#include <type_traits>

#define __CUDACC__ 1
#define __CUDL_EMULATOR__ 1
#define __CUDA_ARCH__ 800  // the emulator implements the sm_80 feature set (inline PTX: see cudl_ptx.h)
#define __CUDACC_VER_MAJOR__ 12

// ------------------------------------------------------------------ qualifiers
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))  // also after __shared__ (alignas may not)
#define __constant__
#define __managed__
#define __grid_constant__
// One OS worker thread runs one block at a time, so per-thread static storage is per-block storage.
#define __shared__ static thread_local
#define __syncthreads() __cudl_syncthreads(__LINE__, __FILE__)

// ------------------------------------------------------------------ runtime entry points
extern "C" {
void __cudl_rt_barrier(int line, const char* file);
int __cudl_rt_barrier_op(int op, int pred, int line, const char* file);
uint64_t __cudl_rt_warp(int op, unsigned mask, uint64_t val, int arg, int width, int line, const char* file);
void* __cudl_dynamic_smem(void);
int __cudl_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void __cudl_rt_trap(const char* what, const char* file, int line) __attribute__((noreturn));
void __cudl_rt_misaligned(const void* p, const char* what, unsigned align, int is_write, const char* file, int line)
    __attribute__((noreturn));
long long __cudl_rt_clock(void);
}
#define printf __cudl_printf
#define __trap() __cudl_rt_trap("__trap() called", __FILE__, __LINE__)
#define __brkpt() ((void)0)

// ------------------------------------------------------------------ vector types
#define CUDL_VEC2(T, N, A) struct alignas(A) N##2 { T x, y; }; \
    static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CUDL_VEC3(T, N) struct N##3 { T x, y, z; }; \
    static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CUDL_VEC4(T, N, A) struct alignas(A) N##4 { T x, y, z, w; }; \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define CUDL_VEC(T, N, A2, A4) CUDL_VEC2(T, N, A2) CUDL_VEC3(T, N) CUDL_VEC4(T, N, A4)
CUDL_VEC(float, float, 8, 16)
CUDL_VEC(int, int, 8, 16)
CUDL_VEC(unsigned int, uint, 8, 16)
CUDL_VEC(signed char, char, 2, 4)
CUDL_VEC(unsigned char, uchar, 2, 4)
CUDL_VEC(short, short, 4, 8)
CUDL_VEC(unsigned short, ushort, 4, 8)
CUDL_VEC(long long, longlong, 16, 16)  // the 4-vectors of 8-byte types: 16-byte aligned, as in CUDA's vector_types.h
CUDL_VEC(unsigned long long, ulonglong, 16, 16)
CUDL_VEC(double, double, 16, 16)
#undef CUDL_VEC
#undef CUDL_VEC2
#undef CUDL_VEC3
#undef CUDL_VEC4
struct float1 { float x; };
struct int1 { int x; };

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// Built-in variables: per OS thread; with fibers the prelude restores threadIdx after every switch.
static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;
#define warpSize 32

// ------------------------------------------------------------------ barriers and warp primitives
enum {
    CUDL_SHFL_IDX, CUDL_SHFL_UP, CUDL_SHFL_DOWN, CUDL_SHFL_XOR, CUDL_BALLOT, CUDL_ANY, CUDL_ALL,
    CUDL_SYNCWARP, CUDL_RED_ADD, CUDL_RED_MIN, CUDL_RED_MAX, CUDL_RED_AND, CUDL_RED_OR, CUDL_RED_XOR,
    CUDL_MATCH_ANY, CUDL_MATCH_ALL, CUDL_ACTIVEMASK,
};
// Every rendezvous is also a compiler memory barrier: __shared__ arrays are statics whose address may never
// escape, and g++ could otherwise keep their values in registers across the (opaque) runtime call.
#define CUDL_MEMBAR() __asm__ __volatile__("" ::: "memory")
static inline void __cudl_syncthreads(int line, const char* file) {
    uint3 me = threadIdx;
    CUDL_MEMBAR();
    __cudl_rt_barrier(line, file);
    CUDL_MEMBAR();
    threadIdx = me;
}
static inline int __cudl_syncthreads_op(int op, int pred, int line, const char* file) {
    uint3 me = threadIdx;
    CUDL_MEMBAR();
    int r = __cudl_rt_barrier_op(op, pred, line, file);
    CUDL_MEMBAR();
    threadIdx = me;
    return r;
}
#define __syncthreads_count(p) __cudl_syncthreads_op(1, (p) ? 1 : 0, __LINE__, __FILE__)
#define __syncthreads_and(p) __cudl_syncthreads_op(2, (p) ? 1 : 0, __LINE__, __FILE__)
#define __syncthreads_or(p) __cudl_syncthreads_op(3, (p) ? 1 : 0, __LINE__, __FILE__)
static inline uint64_t __cudl_warp(int op, unsigned mask, uint64_t v, int arg, int width, int line,
                                   const char* file) {
    uint3 me = threadIdx;
    CUDL_MEMBAR();
    uint64_t r = __cudl_rt_warp(op, mask, v, arg, width, line, file);
    CUDL_MEMBAR();
    threadIdx = me;
    return r;
}
template <class T> static inline uint64_t __cudl_bits(const T& v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> static inline T __cudl_from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}
#define CUDL_SHFL(NAME, OP) \
    template <class T> static inline T __cudl_##NAME(unsigned mask, T v, int a, int width, int line, \
                                                     const char* file) { \
        return __cudl_from_bits<T>(__cudl_warp(OP, mask, __cudl_bits(v), a, width, line, file)); \
    }
CUDL_SHFL(shfl_sync, CUDL_SHFL_IDX)
CUDL_SHFL(shfl_up_sync, CUDL_SHFL_UP)
CUDL_SHFL(shfl_down_sync, CUDL_SHFL_DOWN)
CUDL_SHFL(shfl_xor_sync, CUDL_SHFL_XOR)
#undef CUDL_SHFL
#define __shfl_sync(m, v, l, ...) __cudl_shfl_sync(m, v, l, __cudl_width(__VA_ARGS__ + 0), __LINE__, __FILE__)
#define __shfl_up_sync(m, v, d, ...) __cudl_shfl_up_sync(m, v, d, __cudl_width(__VA_ARGS__ + 0), __LINE__, __FILE__)
#define __shfl_down_sync(m, v, d, ...) \
    __cudl_shfl_down_sync(m, v, d, __cudl_width(__VA_ARGS__ + 0), __LINE__, __FILE__)
#define __shfl_xor_sync(m, v, d, ...) __cudl_shfl_xor_sync(m, v, d, __cudl_width(__VA_ARGS__ + 0), __LINE__, __FILE__)
static inline int __cudl_width(int w) { return w == 0 ? 32 : w; }
#define __ballot_sync(m, p) \
    ((unsigned)__cudl_warp(CUDL_BALLOT, m, (p) ? 1 : 0, 0, 32, __LINE__, __FILE__))
#define __any_sync(m, p) ((int)__cudl_warp(CUDL_ANY, m, (p) ? 1 : 0, 0, 32, __LINE__, __FILE__))
#define __all_sync(m, p) ((int)__cudl_warp(CUDL_ALL, m, (p) ? 1 : 0, 0, 32, __LINE__, __FILE__))
#define __syncwarp(...) ((void)__cudl_warp(CUDL_SYNCWARP, __cudl_mask(__VA_ARGS__ + 0), 0, 0, 32, __LINE__, __FILE__))
static inline unsigned __cudl_mask(unsigned m) { return m == 0 ? 0xffffffffu : m; }
// Lanes that reach this __activemask() together (a rendezvous in the emulator; see runtime.cpp).
#define __activemask() ((unsigned)__cudl_warp(CUDL_ACTIVEMASK, 0, 0, 0, 32, __LINE__, __FILE__))
#define CUDL_RED(NAME, OP, SIGNED) \
    static inline unsigned __cudl_##NAME(unsigned m, unsigned v, int line, const char* f) { \
        return (unsigned)__cudl_warp(OP, m, v, SIGNED, 32, line, f); } \
    static inline int __cudl_##NAME(unsigned m, int v, int line, const char* f) { \
        return (int)(unsigned)__cudl_warp(OP, m, (unsigned)v, 1, 32, line, f); }
CUDL_RED(reduce_add_sync, CUDL_RED_ADD, 0)
CUDL_RED(reduce_min_sync, CUDL_RED_MIN, 0)
CUDL_RED(reduce_max_sync, CUDL_RED_MAX, 0)
#undef CUDL_RED
#define __reduce_add_sync(m, v) __cudl_reduce_add_sync(m, v, __LINE__, __FILE__)
#define __reduce_min_sync(m, v) __cudl_reduce_min_sync(m, v, __LINE__, __FILE__)
#define __reduce_max_sync(m, v) __cudl_reduce_max_sync(m, v, __LINE__, __FILE__)
#define __reduce_and_sync(m, v) ((unsigned)__cudl_warp(CUDL_RED_AND, m, (unsigned)(v), 0, 32, __LINE__, __FILE__))
#define __reduce_or_sync(m, v) ((unsigned)__cudl_warp(CUDL_RED_OR, m, (unsigned)(v), 0, 32, __LINE__, __FILE__))
#define __reduce_xor_sync(m, v) ((unsigned)__cudl_warp(CUDL_RED_XOR, m, (unsigned)(v), 0, 32, __LINE__, __FILE__))
#define __match_any_sync(m, v) ((unsigned)__cudl_warp(CUDL_MATCH_ANY, m, __cudl_bits(v), 0, 32, __LINE__, __FILE__))

// ------------------------------------------------------------------ memory fences, clocks, misc
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }  // also a compiler barrier
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned) {}
static inline long long clock64() { return __cudl_rt_clock(); }
static inline unsigned long long __globaltimer() { return (unsigned long long)__cudl_rt_clock(); }
// Loads and stores with a cache hint: plain accesses here, checked for alignment at the caller's line (a GPU
// faults on a misaligned one; g++'s -fsanitize=alignment would name this header's line instead).
template <class T> static inline const char* __cudl_type_name(char* buf, size_t cap) {
    const char* s = strstr(__PRETTY_FUNCTION__, "T = ");  // g++: "... [with T = float4]", clang: "[T = float4]"
    s = s ? s + 4 : "?";
    size_t n = strcspn(s, ";]");
    snprintf(buf, cap, "%.*s", (int)n, s);
    return buf;
}
template <class T> static inline void __cudl_check_align(const T* p, const char* how, int write, const char* file,
                                                         int line) {
    if ((uintptr_t)p % alignof(T)) {
        char type[100], what[160];
        snprintf(what, sizeof what, "%s of %s (%s)", write ? "write" : "read", __cudl_type_name<T>(type, sizeof type),
                 how);
        __cudl_rt_misaligned(p, what, alignof(T), write, file, line);
    }
}
#define CUDL_LD(NAME) \
    template <class T> static inline T __cudl_##NAME(const T* p, const char* file, int line) { \
        __cudl_check_align(p, #NAME, 0, file, line); return *p; }
#define CUDL_ST(NAME) \
    template <class T> static inline void __cudl_##NAME(T* p, T v, const char* file, int line) { \
        __cudl_check_align(p, #NAME, 1, file, line); *p = v; }
CUDL_LD(__ldg) CUDL_LD(__ldcg) CUDL_LD(__ldcs) CUDL_LD(__ldlu) CUDL_LD(__ldca) CUDL_LD(__ldcv)
CUDL_ST(__stcg) CUDL_ST(__stcs) CUDL_ST(__stwt) CUDL_ST(__stwb)
#undef CUDL_LD
#undef CUDL_ST
#define __ldg(p) __cudl___ldg((p), __FILE__, __LINE__)
#define __ldcg(p) __cudl___ldcg((p), __FILE__, __LINE__)
#define __ldcs(p) __cudl___ldcs((p), __FILE__, __LINE__)
#define __ldlu(p) __cudl___ldlu((p), __FILE__, __LINE__)
#define __ldca(p) __cudl___ldca((p), __FILE__, __LINE__)
#define __ldcv(p) __cudl___ldcv((p), __FILE__, __LINE__)
#define __stcg(p, v) __cudl___stcg((p), (v), __FILE__, __LINE__)
#define __stcs(p, v) __cudl___stcs((p), (v), __FILE__, __LINE__)
#define __stwt(p, v) __cudl___stwt((p), (v), __FILE__, __LINE__)
#define __stwb(p, v) __cudl___stwb((p), (v), __FILE__, __LINE__)
#define __assume(x) ((void)0)

// ------------------------------------------------------------------ math and intrinsics
template <class T> static inline T __cudl_bitcast_(const void* p) { T v; memcpy(&v, p, sizeof(T)); return v; }
static inline int __float_as_int(float f) { return __cudl_bitcast_<int>(&f); }
static inline unsigned __float_as_uint(float f) { return __cudl_bitcast_<unsigned>(&f); }
static inline float __int_as_float(int i) { return __cudl_bitcast_<float>(&i); }
static inline float __uint_as_float(unsigned i) { return __cudl_bitcast_<float>(&i); }
static inline long long __double_as_longlong(double d) { return __cudl_bitcast_<long long>(&d); }
static inline double __longlong_as_double(long long i) { return __cudl_bitcast_<double>(&i); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
// glibc's math.h already declares __expf, __sinf, ... (its internal names): map them with macros.
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __sincosf sincosf
#define __powf powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float fdividef(float x, float y) { return x / y; }
static inline float __saturatef(float x) { return x != x ? 0.0f : fminf(fmaxf(x, 0.0f), 1.0f); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline double __drcp_rn(double x) { return 1.0 / x; }
#define CUDL_RN(OP, EXPR) \
    static inline float __f##OP##_rn(float a, float b) { return EXPR; } \
    static inline float __f##OP##_rz(float a, float b) { return EXPR; } \
    static inline float __f##OP##_ru(float a, float b) { return EXPR; } \
    static inline float __f##OP##_rd(float a, float b) { return EXPR; } \
    static inline double __d##OP##_rn(double a, double b) { return EXPR; }
CUDL_RN(add, a + b)
CUDL_RN(sub, a - b)
CUDL_RN(mul, a * b)
CUDL_RN(div, a / b)
#undef CUDL_RN
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
// dp4a (sm_61+): c + the dot product of the four signed (or unsigned) bytes of a and b
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) c += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    return c;
}
static inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
static inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)((v << (s & 31)) >> 32); }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)(v >> (s & 31)); }
// min/max as CUDA declares them for every arithmetic pair (std::min would reject mixed types).
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline auto min(A a, B b) -> std::common_type_t<A, B> {
    using C = std::common_type_t<A, B>; return (C)b < (C)a ? (C)b : (C)a; }
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline auto max(A a, B b) -> std::common_type_t<A, B> {
    using C = std::common_type_t<A, B>; return (C)a < (C)b ? (C)b : (C)a; }

// ------------------------------------------------------------------ atomics (relaxed, like the GPU's)
#define CUDL_ATOMIC_INT(T) \
    static inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicCAS(T* p, T cmp, T v) { \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return cmp; } \
    static inline T atomicMax(T* p, T v) { T o = __atomic_load_n(p, __ATOMIC_RELAXED); \
        while (o < v && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return o; } \
    static inline T atomicMin(T* p, T v) { T o = __atomic_load_n(p, __ATOMIC_RELAXED); \
        while (v < o && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return o; }
CUDL_ATOMIC_INT(int)
CUDL_ATOMIC_INT(unsigned int)
CUDL_ATOMIC_INT(unsigned long long)
CUDL_ATOMIC_INT(long long)
#undef CUDL_ATOMIC_INT
static inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return cmp; }
static inline unsigned atomicInc(unsigned* p, unsigned lim) {
    unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &o, o >= lim ? 0 : o + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return o; }
static inline unsigned atomicDec(unsigned* p, unsigned lim) {
    unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &o, (o == 0 || o > lim) ? lim : o - 1, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {}
    return o; }
// Floating-point atomics: compare-and-swap on the bits.
template <class F, class U, class Op> static inline F __cudl_atomic_f(F* p, Op op) {
    U* q = reinterpret_cast<U*>(p);
    U o = __atomic_load_n(q, __ATOMIC_RELAXED), n;
    do { F of; memcpy(&of, &o, sizeof(F)); F nf = op(of); memcpy(&n, &nf, sizeof(F)); }
    while (!__atomic_compare_exchange_n(q, &o, n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    F r; memcpy(&r, &o, sizeof(F)); return r;
}
static inline float atomicAdd(float* p, float v) { return __cudl_atomic_f<float, uint32_t>(p, [v](float a) { return a + v; }); }
static inline double atomicAdd(double* p, double v) { return __cudl_atomic_f<double, uint64_t>(p, [v](double a) { return a + v; }); }
static inline float atomicSub(float* p, float v) { return __cudl_atomic_f<float, uint32_t>(p, [v](float a) { return a - v; }); }
static inline float atomicMax(float* p, float v) { return __cudl_atomic_f<float, uint32_t>(p, [v](float a) { return fmaxf(a, v); }); }
static inline float atomicMin(float* p, float v) { return __cudl_atomic_f<float, uint32_t>(p, [v](float a) { return fminf(a, v); }); }
static inline double atomicMax(double* p, double v) { return __cudl_atomic_f<double, uint64_t>(p, [v](double a) { return fmax(a, v); }); }
static inline double atomicMin(double* p, double v) { return __cudl_atomic_f<double, uint64_t>(p, [v](double a) { return fmin(a, v); }); }
static inline float atomicExch(float* p, float v) { return __cudl_atomic_f<float, uint32_t>(p, [v](float) { return v; }); }
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicCAS_block atomicCAS
#define atomicExch_block atomicExch

// ------------------------------------------------------------------ assert
#undef assert
#define assert(e) ((e) ? (void)0 : __cudl_rt_trap("assertion failed: " #e, __FILE__, __LINE__))

#include "cudl_fp16.h"
#include "cudl_wmma.h"
#include "cudl_ptx.h"

// ------------------------------------------------------------------ entry points (used by generated code)
// A pointer argument to a scalar type (float*, const __half*, int*, ...) is checked once per block for the
// alignment of its type (a misaligned one faults at its first access on a GPU), then passed on as known to be
// aligned: g++ then drops the per-access alignment checks of x[i] (-fsanitize=alignment), and keeps those of
// wider accesses made through it (a float4 at x + off), which are the ones that can fail.
template <class T> struct __cudl_scalar : std::integral_constant<bool, std::is_arithmetic<T>::value> {};
template <> struct __cudl_scalar<__half> : std::true_type {};
template <> struct __cudl_scalar<__nv_bfloat16> : std::true_type {};
template <class T> static inline void __cudl_check_arg(const T&) {}
template <class T> static inline void __cudl_check_arg(T* const& p) {
    using U = std::remove_cv_t<T>;
    if constexpr (__cudl_scalar<U>::value) {
        if ((uintptr_t)p % alignof(U)) {
            char type[100], what[160];
            snprintf(what, sizeof what, "a %s* argument", __cudl_type_name<U>(type, sizeof type));
            __cudl_rt_misaligned((const void*)(uintptr_t)p, what, alignof(U), 0, "its launch", 0);
        }
    }
}
template <class T> static inline T __cudl_arg(T v) { return v; }
template <class T> static inline T* __cudl_arg(T* p) {
    if constexpr (__cudl_scalar<std::remove_cv_t<T>>::value)
        return (T*)__builtin_assume_aligned((const void*)(uintptr_t)p, alignof(std::remove_cv_t<T>));
    else
        return p;
}
template <class F> struct __cudl_sig;
template <class... P> struct __cudl_sig<void (*)(P...)> {
    // The arguments, copied once per block (a launch's arguments are the same for every thread): the plain loop
    // then passes locals, which the compiler neither reloads nor checks for alignment thread after thread.
    using Args = std::tuple<std::remove_cv_t<std::remove_reference_t<P>>...>;
    template <size_t... I> static inline Args args(void** a, std::index_sequence<I...>) {
        Args v(*reinterpret_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(a[I])...);
        (__cudl_check_arg(std::get<I>(v)), ...);
        return v;
    }
    static inline Args args(void** a) { return args(a, std::index_sequence_for<P...>()); }
    template <void (*F)(P...), size_t... I> static inline void call(Args& v, std::index_sequence<I...>) {
        F(__cudl_arg(std::get<I>(v))...);
    }
    template <void (*F)(P...)> static inline void call(Args& v) { call<F>(v, std::index_sequence_for<P...>()); }
};
// info: blockIdx[3], blockDim[3], gridDim[3], threadIdx[3]
static inline void __cudl_set_block(const unsigned* info) {
    blockIdx = uint3{info[0], info[1], info[2]};
    blockDim = dim3(info[3], info[4], info[5]);
    gridDim = dim3(info[6], info[7], info[8]);
}
// All threads of one block in a plain loop (kernels without barriers or warp primitives); info[12]: in reverse
// order (CUDL_EMULATOR_SCHEDULE=reverse).
template <class S, S F> static inline void __cudl_run_block(void** a, const unsigned* info) {
    __cudl_set_block(info);
    const unsigned bx = info[3], by = info[4], bz = info[5];
    typename __cudl_sig<S>::Args v = __cudl_sig<S>::args(a);
    // threadIdx field by field: a uint3 built on the stack and copied as 8 + 4 bytes stalls on store forwarding
    if (!info[12]) {
        for (unsigned z = 0; z < bz; z++)
            for (unsigned y = 0; y < by; y++)
                for (unsigned x = 0; x < bx; x++) {
                    threadIdx.x = x, threadIdx.y = y, threadIdx.z = z;
                    __cudl_sig<S>::template call<F>(v);
                }
    } else {
        for (unsigned z = bz; z-- > 0;)
            for (unsigned y = by; y-- > 0;)
                for (unsigned x = bx; x-- > 0;) {
                    threadIdx.x = x, threadIdx.y = y, threadIdx.z = z;
                    __cudl_sig<S>::template call<F>(v);
                }
    }
}
// One thread, as a fiber (kernels with barriers or warp primitives).
template <class S, S F> static inline void __cudl_run_thread(void** a, const unsigned* info) {
    __cudl_set_block(info);
    threadIdx = uint3{info[9], info[10], info[11]};
    __cudl_cp_reset();
    typename __cudl_sig<S>::Args v = __cudl_sig<S>::args(a);
    __cudl_sig<S>::template call<F>(v);
}
#define CUDL_ENTRY(I, ...) \
    extern "C" __attribute__((visibility("default"))) void __cudl_block_##I(void** a, const unsigned* info) { \
        __cudl_run_block<decltype(&__VA_ARGS__), &__VA_ARGS__>(a, info); } \
    extern "C" __attribute__((visibility("default"))) void __cudl_thread_##I(void** a, const unsigned* info) { \
        __cudl_run_thread<decltype(&__VA_ARGS__), &__VA_ARGS__>(a, info); }
extern "C" __attribute__((visibility("default"))) const void* __cudl_tid_ptr(void) { return &threadIdx; }
// Address and size of a __constant__ / __device__ variable, for Kernel.get_global.
#define CUDL_GLOBAL(N) \
    extern "C" __attribute__((visibility("default"))) void* __cudl_global_##N(unsigned long long* n) { \
        *n = sizeof(N); return (void*)&N; }

// NVRTC defines none of <math.h>'s macros: hide them so a kernel that uses them fails here as it would on a GPU.
#undef INFINITY
#undef NAN
#undef HUGE_VALF
#undef HUGE_VAL

#endif  // CUDL_PRELUDE_H
