// __half and __nv_bfloat16 for the cudl emulator: 16-bit storage, arithmetic in float, conversions
// rounded to nearest even (subnormals, infinities and NaN included; NaN converts to 0x7fff like the GPU).
#pragma once
#include <stdint.h>
#include <string.h>
#include <math.h>

static inline float __cudl_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __cudl_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline unsigned short __cudl_f2h_bits(float f) {
    uint32_t x = __cudl_f2u(f), sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return 0x7fffu;                  // NaN
    if (x >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520 rounds to infinity
    if (x >= 0x38800000u) {                                // normal half
        uint32_t r = (x - 0x38000000u) >> 13, rem = x & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
        return (unsigned short)(sign | r);
    }
    if (x < 0x33000000u) return (unsigned short)sign;     // <= 2^-25 rounds to zero
    uint32_t e = x >> 23, mant = (x & 0x7fffffu) | 0x800000u, s = 126u - e;  // subnormal half
    uint32_t r = mant >> s, rem = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (unsigned short)(sign | r);
}
static inline float __cudl_h2f_bits(unsigned short h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return sign ? -v : v;
    }
    if (e == 31) return __cudl_u2f(sign | 0x7f800000u | (m << 13));
    return __cudl_u2f(sign | ((e + 112u) << 23) | (m << 13));
}
static inline unsigned short __cudl_f2bf_bits(float f) {
    uint32_t x = __cudl_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float __cudl_bf2f_bits(unsigned short b) { return __cudl_u2f((uint32_t)b << 16); }

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

#define CUDL_HALF_TYPE(T, RAW, TOBITS, TOFLOAT) \
    struct alignas(2) T { \
        unsigned short __x; \
        T() = default; \
        constexpr T(RAW r) : __x(r.x) {} \
        T(float f) : __x(TOBITS(f)) {} \
        T(double f) : __x(TOBITS((float)f)) {} \
        T(int i) : __x(TOBITS((float)i)) {} \
        T(unsigned i) : __x(TOBITS((float)i)) {} \
        T(long long i) : __x(TOBITS((float)i)) {} \
        T(unsigned long long i) : __x(TOBITS((float)i)) {} \
        T(short i) : __x(TOBITS((float)i)) {} \
        T(unsigned short i) : __x(TOBITS((float)i)) {} \
        operator float() const { return TOFLOAT(__x); } \
        operator RAW() const { return RAW{__x}; } \
        T& operator=(float f) { __x = TOBITS(f); return *this; } \
        T& operator=(double f) { __x = TOBITS((float)f); return *this; } \
        T& operator+=(const T& o) { return *this = T((float)*this + (float)o); } \
        T& operator-=(const T& o) { return *this = T((float)*this - (float)o); } \
        T& operator*=(const T& o) { return *this = T((float)*this * (float)o); } \
        T& operator/=(const T& o) { return *this = T((float)*this / (float)o); } \
    }; \
    static inline T operator+(const T& a, const T& b) { return T((float)a + (float)b); } \
    static inline T operator-(const T& a, const T& b) { return T((float)a - (float)b); } \
    static inline T operator*(const T& a, const T& b) { return T((float)a * (float)b); } \
    static inline T operator/(const T& a, const T& b) { return T((float)a / (float)b); } \
    static inline T operator-(const T& a) { T r; r.__x = a.__x ^ 0x8000u; return r; } \
    static inline T operator+(const T& a) { return a; } \
    static inline bool operator==(const T& a, const T& b) { return (float)a == (float)b; } \
    static inline bool operator!=(const T& a, const T& b) { return (float)a != (float)b; } \
    static inline bool operator<(const T& a, const T& b) { return (float)a < (float)b; } \
    static inline bool operator<=(const T& a, const T& b) { return (float)a <= (float)b; } \
    static inline bool operator>(const T& a, const T& b) { return (float)a > (float)b; } \
    static inline bool operator>=(const T& a, const T& b) { return (float)a >= (float)b; }
CUDL_HALF_TYPE(__half, __half_raw, __cudl_f2h_bits, __cudl_h2f_bits)
CUDL_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, __cudl_f2bf_bits, __cudl_bf2f_bits)
#undef CUDL_HALF_TYPE
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

#define CUDL_HALF2_TYPE(T2, T) \
    struct alignas(4) T2 { \
        T x, y; \
        T2() = default; \
        constexpr T2(T a, T b) : x(a), y(b) {} \
    }; \
    static inline T2 operator+(const T2& a, const T2& b) { return T2(a.x + b.x, a.y + b.y); } \
    static inline T2 operator-(const T2& a, const T2& b) { return T2(a.x - b.x, a.y - b.y); } \
    static inline T2 operator*(const T2& a, const T2& b) { return T2(a.x * b.x, a.y * b.y); } \
    static inline T2 operator/(const T2& a, const T2& b) { return T2(a.x / b.x, a.y / b.y); }
CUDL_HALF2_TYPE(__half2, __half)
CUDL_HALF2_TYPE(__nv_bfloat162, __nv_bfloat16)
#undef CUDL_HALF2_TYPE
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

// conversions
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double d) { return __half((float)d); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __int2half_rn(int i) { return __half((float)i); }
static inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h); }
static inline int __half2int_rz(__half h) { return (int)(float)h; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __short_as_half(short s) { return __half(__half_raw{(unsigned short)s}); }
static inline __half __ushort_as_half(unsigned short s) { return __half(__half_raw{s}); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
static inline __half2 __float2half2_rn(float a) { return __half2(__half(a), __half(a)); }
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16((float)d); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __short_as_bfloat16(short s) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)s}); }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return __nv_bfloat16(__nv_bfloat16_raw{s}); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162(__nv_bfloat16(f.x), __nv_bfloat16(f.y)); }
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(a)); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
static inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }

// functions defined for both 16-bit types
#define CUDL_H_FUNCS(T, T2) \
    static inline float __low2float(T2 h) { return (float)h.x; } \
    static inline float __high2float(T2 h) { return (float)h.y; } \
    static inline T __hadd(T a, T b) { return a + b; } \
    static inline T __hsub(T a, T b) { return a - b; } \
    static inline T __hmul(T a, T b) { return a * b; } \
    static inline T __hdiv(T a, T b) { return a / b; } \
    static inline T __hneg(T a) { return -a; } \
    static inline T __habs(T a) { T r = a; r.__x &= 0x7fffu; return r; } \
    static inline T __hfma(T a, T b, T c) { return T(fmaf((float)a, (float)b, (float)c)); } \
    static inline T __hadd_sat(T a, T b) { return T(fminf(fmaxf((float)a + (float)b, 0.f), 1.f)); } \
    static inline T __hmul_sat(T a, T b) { return T(fminf(fmaxf((float)a * (float)b, 0.f), 1.f)); } \
    static inline T __hmax(T a, T b) { float x = a, y = b; return x != x ? b : y != y ? a : (x > y ? a : b); } \
    static inline T __hmin(T a, T b) { float x = a, y = b; return x != x ? b : y != y ? a : (x < y ? a : b); } \
    static inline T __hmax_nan(T a, T b) { float x = a, y = b; return x != x ? a : y != y ? b : (x > y ? a : b); } \
    static inline T __hmin_nan(T a, T b) { float x = a, y = b; return x != x ? a : y != y ? b : (x < y ? a : b); } \
    static inline bool __heq(T a, T b) { return a == b; } \
    static inline bool __hne(T a, T b) { return a != b; } \
    static inline bool __hlt(T a, T b) { return a < b; } \
    static inline bool __hle(T a, T b) { return a <= b; } \
    static inline bool __hgt(T a, T b) { return a > b; } \
    static inline bool __hge(T a, T b) { return a >= b; } \
    static inline bool __hisnan(T a) { float x = a; return x != x; } \
    static inline int __hisinf(T a) { float x = a; return isinf(x) ? (x > 0 ? 1 : -1) : 0; } \
    static inline T hexp(T a) { return T(expf((float)a)); } \
    static inline T hexp2(T a) { return T(exp2f((float)a)); } \
    static inline T hlog(T a) { return T(logf((float)a)); } \
    static inline T hlog2(T a) { return T(log2f((float)a)); } \
    static inline T hsqrt(T a) { return T(sqrtf((float)a)); } \
    static inline T hrsqrt(T a) { return T(1.0f / sqrtf((float)a)); } \
    static inline T hrcp(T a) { return T(1.0f / (float)a); } \
    static inline T hsin(T a) { return T(sinf((float)a)); } \
    static inline T hcos(T a) { return T(cosf((float)a)); } \
    static inline T htanh(T a) { return T(tanhf((float)a)); } \
    static inline T hfloor(T a) { return T(floorf((float)a)); } \
    static inline T hceil(T a) { return T(ceilf((float)a)); } \
    static inline T htrunc(T a) { return T(truncf((float)a)); } \
    static inline T hrint(T a) { return T(rintf((float)a)); } \
    static inline T2 __hadd2(T2 a, T2 b) { return a + b; } \
    static inline T2 __hsub2(T2 a, T2 b) { return a - b; } \
    static inline T2 __hmul2(T2 a, T2 b) { return a * b; } \
    static inline T2 __h2div(T2 a, T2 b) { return a / b; } \
    static inline T2 __hneg2(T2 a) { return T2(-a.x, -a.y); } \
    static inline T2 __habs2(T2 a) { return T2(__habs(a.x), __habs(a.y)); } \
    static inline T2 __hfma2(T2 a, T2 b, T2 c) { return T2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
    static inline T2 __hmax2(T2 a, T2 b) { return T2(__hmax(a.x, b.x), __hmax(a.y, b.y)); } \
    static inline T2 __hmin2(T2 a, T2 b) { return T2(__hmin(a.x, b.x), __hmin(a.y, b.y)); } \
    static inline T2 h2exp(T2 a) { return T2(hexp(a.x), hexp(a.y)); } \
    static inline T2 h2sqrt(T2 a) { return T2(hsqrt(a.x), hsqrt(a.y)); } \
    static inline T2 h2rsqrt(T2 a) { return T2(hrsqrt(a.x), hrsqrt(a.y)); } \
    static inline T2 __lowhigh2highlow(T2 a) { return T2(a.y, a.x); }
CUDL_H_FUNCS(__half, __half2)
CUDL_H_FUNCS(__nv_bfloat16, __nv_bfloat162)
#undef CUDL_H_FUNCS
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __low2half2(__half2 h) { return __half2(h.x, h.x); }
static inline __half2 __high2half2(__half2 h) { return __half2(h.y, h.y); }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
static inline __half atomicAdd(__half* p, __half v) {
    unsigned short o = __atomic_load_n(&p->__x, __ATOMIC_RELAXED), n;
    do { n = __half((float)__ushort_as_half(o) + (float)v).__x; }
    while (!__atomic_compare_exchange_n(&p->__x, &o, n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return __ushort_as_half(o);
}
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    unsigned short o = __atomic_load_n(&p->__x, __ATOMIC_RELAXED), n;
    do { n = __nv_bfloat16((float)__ushort_as_bfloat16(o) + (float)v).__x; }
    while (!__atomic_compare_exchange_n(&p->__x, &o, n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return __ushort_as_bfloat16(o);
}
