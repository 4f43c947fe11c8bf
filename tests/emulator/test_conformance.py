"""Conformance: small kernels whose results the CPU emulator must reproduce exactly as a GPU does.

Written against cudl.load / cudl.xp / cudl.to_numpy only, so the same file runs with CUDL_BACKEND=gpu
(the expected values are computed in NumPy from CUDA's documented semantics).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import cudl

RNG = np.random.default_rng(1234)
FULL = 0xFFFFFFFF


def dev(a: np.ndarray):
    """A copy on the current backend (on the emulator xp.asarray would alias the NumPy array)."""
    return cudl.xp.array(a)


def host(a) -> np.ndarray:
    cudl.sync()
    return cudl.to_numpy(a)


# ------------------------------------------------------------------------------ barriers, shared memory

BARRIERS = r"""
// tree reduction in static shared memory: one barrier per level
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// reverse each block's slice through dynamic shared memory
extern "C" __global__ void block_reverse(const int* __restrict__ x, int* __restrict__ y) {
    extern __shared__ int buf[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = x[i];
    __syncthreads();
    y[i] = buf[blockDim.x - 1 - threadIdx.x];
}

// a barrier inside a __device__ function (the kernel body itself has none)
__device__ void rotate_in_block(float* s, float v, float* out) {
    s[threadIdx.x] = v;
    __syncthreads();
    *out = s[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void block_rotate(const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float s[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    rotate_in_block(s, x[i], &y[i]);
}

"""


BARRIER_VOTES = r"""
// __syncthreads_count / _and / _or
extern "C" __global__ void barrier_votes(const int* __restrict__ x, int* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int p = x[i] > 0;
    int c = __syncthreads_count(p);
    int a = __syncthreads_and(p);
    int o = __syncthreads_or(p);
    if (threadIdx.x == 0) { out[3 * blockIdx.x] = c; out[3 * blockIdx.x + 1] = a; out[3 * blockIdx.x + 2] = o; }
}
"""


def test_shared_tree_reduction():
    n = 10_000
    x = RNG.standard_normal(n).astype(np.float32)
    blocks = (n + 255) // 256
    out = cudl.xp.zeros(blocks, np.float32)
    cudl.load(BARRIERS, "block_sum")(blocks, 256, (dev(x), out, n))
    ref = np.add.reduceat(np.pad(x, (0, blocks * 256 - n)).astype(np.float64), np.arange(0, blocks * 256, 256))
    np.testing.assert_allclose(host(out), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [32, 96, 256])
def test_dynamic_shared_memory(threads):
    blocks = 5
    x = RNG.integers(-1000, 1000, blocks * threads).astype(np.int32)
    y = cudl.xp.zeros_like(dev(x))
    cudl.load(BARRIERS, "block_reverse")(blocks, threads, (dev(x), y), shared_mem=threads * 4)
    np.testing.assert_array_equal(host(y), x.reshape(blocks, threads)[:, ::-1].ravel())


def test_barrier_in_device_function():
    x = RNG.standard_normal(3 * 128).astype(np.float32)
    y = cudl.xp.zeros_like(dev(x))
    cudl.load(BARRIERS, "block_rotate")(3, 128, (dev(x), y))
    np.testing.assert_array_equal(host(y), np.roll(x.reshape(3, 128), -1, axis=1).ravel())


def test_syncthreads_count_and_or():
    x = RNG.integers(-3, 2, (4, 64)).astype(np.int32)
    x[1] = 1  # all true
    x[2] = -1  # all false
    out = cudl.xp.zeros(12, np.int32)
    cudl.load(BARRIER_VOTES, "barrier_votes")(4, 64, (dev(x.ravel()), out))
    p = x > 0
    ref = np.stack([p.sum(1), p.all(1), p.any(1)], axis=1).astype(np.int32).ravel()
    np.testing.assert_array_equal(host(out), ref)


# ------------------------------------------------------------------------------ warp primitives

WARPS = r"""
extern "C" __global__ void shfl_int(const int* __restrict__ x, int* __restrict__ y, int mode, int arg, int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i], r;
    if (mode == 0) r = __shfl_sync(0xffffffff, v, arg, width);
    else if (mode == 1) r = __shfl_up_sync(0xffffffff, v, arg, width);
    else if (mode == 2) r = __shfl_down_sync(0xffffffff, v, arg, width);
    else r = __shfl_xor_sync(0xffffffff, v, arg, width);
    y[i] = r;
}
extern "C" __global__ void shfl_wide(const double* __restrict__ x, double* __restrict__ y,
                                     const float* __restrict__ f, float* __restrict__ g) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = __shfl_xor_sync(0xffffffff, x[i], 5);      // 8-byte values
    g[i] = __shfl_down_sync(0xffffffff, f[i], 3);     // default width 32
}
extern "C" __global__ void warp_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
    if (threadIdx.x % 32 == 0) out[i / 32] = v;
}
// votes over the whole warp, then over a diverged half-warp with a matching mask
extern "C" __global__ void votes(const int* __restrict__ x, unsigned* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    int p = x[i] > 0;
    unsigned b = __ballot_sync(0xffffffff, p);
    int a = __any_sync(0xffffffff, p);
    int l = __all_sync(0xffffffff, p);
    unsigned hb = 0, ha = 0, hl = 0;
    if (lane < 16) {
        hb = __ballot_sync(0x0000ffff, p);
        ha = __any_sync(0x0000ffff, p);
        hl = __all_sync(0x0000ffff, p);
    } else {
        hb = __ballot_sync(0xffff0000, p);
        ha = __any_sync(0xffff0000, p);
        hl = __all_sync(0xffff0000, p);
    }
    __syncwarp();
    unsigned* o = out + 6 * i;
    o[0] = b; o[1] = a; o[2] = l; o[3] = hb; o[4] = ha; o[5] = hl;
}
extern "C" __global__ void warp_reduce_add(const unsigned* __restrict__ x, unsigned* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __reduce_add_sync(0xffffffff, x[i]);
}
"""


def shfl_reference(x: np.ndarray, mode: int, arg: int, width: int) -> np.ndarray:
    """CUDA's shfl semantics per warp: width-sized segments; out-of-segment sources return the own value."""
    lane = np.arange(x.size) % 32
    base = np.arange(x.size) - lane
    seg = lane & ~(width - 1)
    if mode == 0:
        src = seg + (arg & (width - 1))
    elif mode == 1:
        src = np.where(lane - arg >= seg, lane - arg, lane)
    elif mode == 2:
        src = np.where(lane + arg <= seg + width - 1, lane + arg, lane)
    else:
        src = np.where((lane ^ arg) <= seg + width - 1, lane ^ arg, lane)  # earlier segments are reachable
    return x[base + src]


@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["idx", "up", "down", "xor"])
def test_shuffles_every_offset_and_width(mode):
    k = cudl.load(WARPS, "shfl_int")
    x = RNG.integers(-(2**31), 2**31 - 1, 64).astype(np.int32)
    dx = dev(x)
    for width in (32, 16, 8, 4, 2, 1):
        for arg in (0, 1, 2, 3, 5, 8, 13, 16, 31):
            y = cudl.xp.zeros_like(dx)
            k(1, 64, (dx, y, mode, arg, width))
            np.testing.assert_array_equal(host(y), shfl_reference(x, mode, arg, width),
                                          err_msg=f"mode {mode} arg {arg} width {width}")


def test_shuffle_8_byte_and_float_values():
    x = RNG.standard_normal(64)
    f = RNG.standard_normal(64).astype(np.float32)
    y = cudl.xp.zeros(64, np.float64)
    g = cudl.xp.zeros(64, np.float32)
    cudl.load(WARPS, "shfl_wide")(1, 64, (dev(x), y, dev(f), g))
    np.testing.assert_array_equal(host(y), shfl_reference(x, 3, 5, 32))
    np.testing.assert_array_equal(host(g), shfl_reference(f, 2, 3, 32))


def test_warp_sum_with_shuffles():
    n = 1000
    x = RNG.integers(-50, 50, n).astype(np.float32)  # integers: every summation order is exact
    out = cudl.xp.zeros(32, np.float32)
    cudl.load(WARPS, "warp_sum")(4, 256, (dev(x), out, n))
    np.testing.assert_array_equal(host(out), np.pad(x, (0, 24)).reshape(32, 32).sum(1))


def test_ballot_any_all_with_divergence():
    x = RNG.integers(-1, 2, (4, 32)).astype(np.int32)
    x[1] = 1
    x[2, :16] = 1  # first half all true, second half mixed
    x[3] = 0
    out = cudl.xp.zeros(128 * 6, np.uint32)
    cudl.load(WARPS, "votes")(1, 128, (dev(x.ravel()), out))
    got = host(out).reshape(4, 32, 6)
    p = x > 0
    bits = (p.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(1).astype(np.uint32)
    lo, hi = bits & 0xFFFF, bits & 0xFFFF0000
    for w in range(4):
        np.testing.assert_array_equal(got[w, :, 0], bits[w])
        np.testing.assert_array_equal(got[w, :, 1], p[w].any())
        np.testing.assert_array_equal(got[w, :, 2], p[w].all())
        np.testing.assert_array_equal(got[w, :16, 3], lo[w])
        np.testing.assert_array_equal(got[w, 16:, 3], hi[w])
        np.testing.assert_array_equal(got[w, :16, 4], p[w, :16].any())
        np.testing.assert_array_equal(got[w, 16:, 4], p[w, 16:].any())
        np.testing.assert_array_equal(got[w, :16, 5], p[w, :16].all())
        np.testing.assert_array_equal(got[w, 16:, 5], p[w, 16:].all())


def test_reduce_add_sync():
    x = RNG.integers(0, 1000, 64).astype(np.uint32)
    out = cudl.xp.zeros(64, np.uint32)
    cudl.load(WARPS, "warp_reduce_add")(1, 64, (dev(x), out))
    np.testing.assert_array_equal(host(out), np.repeat(x.reshape(2, 32).sum(1), 32).astype(np.uint32))


# ------------------------------------------------------------------------------ atomics

ATOMICS = r"""
extern "C" __global__ void atomics(const float* __restrict__ xf, const int* __restrict__ xi, int n,
                                   int* counter, float* fsum, double* dsum, unsigned long long* usum,
                                   int* imax, int* imin, unsigned* hist, int* sub) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(counter, 1);
    atomicAdd(fsum, xf[i]);
    atomicAdd(dsum, (double)xf[i]);
    atomicAdd(usum, (unsigned long long)(xi[i] + 1000));
    atomicMax(imax, xi[i]);
    atomicMin(imin, xi[i]);
    atomicAdd(&hist[(xi[i] + 1000) % 16], 1u);
    atomicSub(sub, 2);
}
// lock-free float max through compare-and-swap on the bits
__device__ float atomic_max_float(float* addr, float v) {
    int* p = (int*)addr;
    int old = *p, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= v) break;
        old = atomicCAS(p, assumed, __float_as_int(v));
    } while (old != assumed);
    return __int_as_float(old);
}
extern "C" __global__ void cas_max(const float* __restrict__ x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_max_float(out, x[i]);
}
extern "C" __global__ void exch_last(int* slot, int* seen, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) seen[i] = atomicExch(slot, i);
}
"""


def test_atomics_under_contention():
    n = 200_000
    xi = RNG.integers(-1000, 1000, n).astype(np.int32)
    xf = xi.astype(np.float32) / 8  # exact in float: any summation order gives the same float sum
    counter = cudl.xp.zeros(1, np.int32)
    fsum = cudl.xp.zeros(1, np.float32)
    dsum = cudl.xp.zeros(1, np.float64)
    usum = cudl.xp.zeros(1, np.uint64)
    imax = cudl.xp.full(1, -(2**31), np.int32)
    imin = cudl.xp.full(1, 2**31 - 1, np.int32)
    hist = cudl.xp.zeros(16, np.uint32)
    sub = cudl.xp.zeros(1, np.int32)
    args = (dev(xf), dev(xi), n, counter, fsum, dsum, usum, imax, imin, hist, sub)
    cudl.load(ATOMICS, "atomics")((n + 255) // 256, 256, args)
    assert host(counter)[0] == n
    assert host(fsum)[0] == np.float32(xf.astype(np.float64).sum())
    assert host(dsum)[0] == xf.astype(np.float64).sum()
    assert host(usum)[0] == (xi.astype(np.int64) + 1000).sum()
    assert host(imax)[0] == xi.max() and host(imin)[0] == xi.min()
    np.testing.assert_array_equal(host(hist), np.bincount((xi + 1000) % 16, minlength=16))
    assert host(sub)[0] == -2 * n


def test_float_atomic_add_random_values_within_tolerance():
    n = 100_000
    x = RNG.standard_normal(n).astype(np.float32)
    fsum = cudl.xp.zeros(1, np.float32)
    z = cudl.xp.zeros(1, np.int32)
    args = (dev(x), dev(np.zeros(n, np.int32)), n, z, fsum, cudl.xp.zeros(1, np.float64),
            cudl.xp.zeros(1, np.uint64), cudl.xp.zeros(1, np.int32), cudl.xp.zeros(1, np.int32),
            cudl.xp.zeros(16, np.uint32), cudl.xp.zeros(1, np.int32))
    cudl.load(ATOMICS, "atomics")((n + 255) // 256, 256, args)
    assert abs(host(fsum)[0] - x.astype(np.float64).sum()) < 1e-3 * np.abs(x).sum()


def test_cas_max_and_exch():
    n = 50_000
    x = RNG.standard_normal(n).astype(np.float32)
    out = cudl.xp.full(1, -np.inf, np.float32)
    cudl.load(ATOMICS, "cas_max")((n + 255) // 256, 256, (dev(x), out, n))
    assert host(out)[0] == x.max()
    slot = cudl.xp.full(1, -1, np.int32)
    seen = cudl.xp.zeros(n, np.int32)
    cudl.load(ATOMICS, "exch_last")((n + 255) // 256, 256, (slot, seen, n))
    # every value is handed on exactly once: the seen values plus the final slot are -1, 0, ..., n-1
    allv = np.sort(np.append(host(seen), host(slot)))
    np.testing.assert_array_equal(allv, np.arange(-1, n))


# ------------------------------------------------------------------------------ half, bfloat16

HALF = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void to_half_bf16(const float* __restrict__ x, __half* __restrict__ h,
                                        __nv_bfloat16* __restrict__ b, float* __restrict__ hb,
                                        float* __restrict__ bb, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        h[i] = __float2half_rn(x[i]);
        b[i] = __float2bfloat16(x[i]);
        hb[i] = __half2float(h[i]);
        bb[i] = __bfloat162float(b[i]);
    }
}
extern "C" __global__ void half_math(const __half* __restrict__ a, const __half* __restrict__ b,
                                     __half* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[6 * i + 0] = __hadd(a[i], b[i]);
        out[6 * i + 1] = __hmul(a[i], b[i]);
        out[6 * i + 2] = __hsub(a[i], b[i]);
        out[6 * i + 3] = __hmax(a[i], b[i]);
        out[6 * i + 4] = a[i] * b[i] + a[i];
        __half2 p = __hadd2(__halves2half2(a[i], b[i]), __floats2half2_rn(1.0f, -1.0f));
        out[6 * i + 5] = __float2half(__low2float(p) + __high2float(p));
    }
}
extern "C" __global__ void bf16_pairs(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                      float* __restrict__ back, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n2) {
        __nv_bfloat162 p = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
        y[2 * i] = p.x;
        y[2 * i + 1] = p.y;
        float2 f = __bfloat1622float2(p);
        back[2 * i] = f.x;
        back[2 * i + 1] = f.y;
    }
}
"""


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (NaN kept NaN)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), (u >> 16).astype(np.uint16) | 0x40, r)


def special_floats() -> np.ndarray:
    n = 20_000
    x = (RNG.standard_normal(n) * np.exp2(RNG.uniform(-30, 18, n))).astype(np.float32)
    # exact ties of half and of bfloat16 rounding, subnormal halves, the overflow threshold, specials
    ties = np.float16(RNG.standard_normal(500)).astype(np.float32)
    ties += np.sign(ties) * np.abs(ties) * np.float32(2**-11)
    bf_ties = (bf16_bits(RNG.standard_normal(500).astype(np.float32)).astype(np.uint32) << 16 | 0x8000)
    extra = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, -65520, 6e-8, 3e-8, 2.98e-8, 5.96e-8,
             1e-45, 6.1035e-05, 6.1e-05, 3.4e38, -1e-10]
    return np.concatenate([x, ties, bf_ties.view(np.float32), np.array(extra, np.float32)])


def test_half_and_bf16_conversion_rounding():
    x = special_floats()
    n = x.size
    h = cudl.xp.zeros(n, np.float16)
    b = cudl.xp.zeros(n, np.uint16)  # the book passes bfloat16 arrays as raw uint16 bits
    hb = cudl.xp.zeros(n, np.float32)
    bb = cudl.xp.zeros(n, np.float32)
    cudl.load(HALF, "to_half_bf16")((n + 255) // 256, 256, (dev(x), h, b, hb, bb, n))
    with np.errstate(over="ignore"):  # values past 65520 become inf, as on the GPU
        ref = x.astype(np.float16)
    got = host(h)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), ref[~nan].view(np.uint16))
    assert np.isnan(got[nan]).all() and np.isnan(host(hb)[nan]).all()
    np.testing.assert_array_equal(host(hb)[~nan], ref[~nan].astype(np.float32))
    gb = host(b)
    np.testing.assert_array_equal(gb[~nan], bf16_bits(x)[~nan])
    np.testing.assert_array_equal(host(bb)[~nan], (bf16_bits(x)[~nan].astype(np.uint32) << 16).view(np.float32))


def test_half_arithmetic():
    n = 4096
    a = RNG.standard_normal(n).astype(np.float16)
    b = (RNG.standard_normal(n) * 10).astype(np.float16)
    out = cudl.xp.zeros(6 * n, np.float16)
    cudl.load(HALF, "half_math")((n + 255) // 256, 256, (dev(a), dev(b), out, n))
    got = host(out).reshape(n, 6)
    f32 = np.float32
    np.testing.assert_array_equal(got[:, 0], (a.astype(f32) + b.astype(f32)).astype(np.float16))
    np.testing.assert_array_equal(got[:, 1], (a.astype(f32) * b.astype(f32)).astype(np.float16))
    np.testing.assert_array_equal(got[:, 2], (a.astype(f32) - b.astype(f32)).astype(np.float16))
    np.testing.assert_array_equal(got[:, 3], np.maximum(a, b))
    ab = (a.astype(f32) * b.astype(f32)).astype(np.float16)
    np.testing.assert_allclose(got[:, 4].astype(f32), (ab.astype(f32) + a.astype(f32)), rtol=2e-3, atol=1e-3)
    p_lo = (a.astype(f32) + 1).astype(np.float16).astype(f32)
    p_hi = (b.astype(f32) - 1).astype(np.float16).astype(f32)
    np.testing.assert_array_equal(got[:, 5], (p_lo + p_hi).astype(np.float16))


def test_bf16_pairs():
    x = special_floats()[:4000]
    x = x[~np.isnan(x)][:3000]
    n2 = x.size // 2
    y = cudl.xp.zeros(2 * n2, np.uint16)
    back = cudl.xp.zeros(2 * n2, np.float32)
    cudl.load(HALF, "bf16_pairs")((n2 + 127) // 128, 128, (dev(x[:2 * n2]), y, back, n2))
    np.testing.assert_array_equal(host(y), bf16_bits(x[:2 * n2]))
    np.testing.assert_array_equal(host(back), (bf16_bits(x[:2 * n2]).astype(np.uint32) << 16).view(np.float32))


# ------------------------------------------------------------------------------ vector types, grids, templates

MISC = r"""
extern "C" __global__ void vectors(const float4* __restrict__ x, float4* __restrict__ y,
                                   const int2* __restrict__ a, int2* __restrict__ b,
                                   const uchar4* __restrict__ c, uchar4* __restrict__ d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = x[i];
        y[i] = make_float4(v.w, v.z, v.y, v.x + 1.0f);
        int2 p = a[i];
        b[i] = make_int2(p.x + p.y, p.x - p.y);
        uchar4 q = c[i];
        d[i] = make_uchar4(q.w, q.z, q.y, (unsigned char)(q.x + 1));
    }
}
extern "C" __global__ void coords(int* __restrict__ out) {
    int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int* o = out + 6 * (bid * blockDim.x * blockDim.y * blockDim.z + tid);
    o[0] = blockIdx.x; o[1] = blockIdx.y; o[2] = blockIdx.z;
    o[3] = threadIdx.x; o[4] = threadIdx.y; o[5] = threadIdx.z + 100 * (gridDim.z * 10 + blockDim.z);
}
template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, T* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void hello(int n) {
    if (threadIdx.x == 0 && blockIdx.x == 1) printf("hello from block %d, n=%d, pi=%.3f\n", blockIdx.x, n, 3.14159f);
}
extern "C" __global__ void in_place_scale(float* x, const float* same, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * same[i];
}
"""


def test_vector_types():
    n = 1000
    x = RNG.standard_normal((n, 4)).astype(np.float32)
    a = RNG.integers(-100, 100, (n, 2)).astype(np.int32)
    c = RNG.integers(0, 255, (n, 4)).astype(np.uint8)
    y, b, d = cudl.xp.zeros_like(dev(x)), cudl.xp.zeros_like(dev(a)), cudl.xp.zeros_like(dev(c))
    cudl.load(MISC, "vectors")((n + 127) // 128, 128, (dev(x), y, dev(a), b, dev(c), d, n))
    ry = x[:, ::-1].copy()
    ry[:, 3] += 1
    np.testing.assert_array_equal(host(y), ry)
    np.testing.assert_array_equal(host(b), np.stack([a.sum(1), a[:, 0] - a[:, 1]], 1))
    rd = c[:, ::-1].copy()
    rd[:, 3] = c[:, 0] + 1
    np.testing.assert_array_equal(host(d), rd)


@pytest.mark.parametrize("grid,block", [((3, 2, 2), (4, 3, 2)), ((2, 3), (8, 4)), (5, 33), ((1, 1, 3), (2, 2, 8))])
def test_grids_and_blocks(grid, block):
    g = np.array((grid,) if isinstance(grid, int) else grid + (1,) * (3 - len(grid)))
    b = np.array((block,) if isinstance(block, int) else block + (1,) * (3 - len(block)))
    g = np.pad(g, (0, 3 - g.size), constant_values=1)
    b = np.pad(b, (0, 3 - b.size), constant_values=1)
    total = int(g.prod() * b.prod())
    out = cudl.xp.full(6 * total, -1, np.int32)
    cudl.load(MISC, "coords")(grid, block, (out,))
    got = host(out).reshape(int(g[2]), int(g[1]), int(g[0]), int(b[2]), int(b[1]), int(b[0]), 6)
    bz, by, bx, tz, ty, tx = np.meshgrid(*[np.arange(v) for v in (g[2], g[1], g[0], b[2], b[1], b[0])],
                                         indexing="ij")
    for k, ref in enumerate([bx, by, bz, tx, ty, tz + 100 * (g[2] * 10 + b[2])]):
        np.testing.assert_array_equal(got[..., k], ref)


@pytest.mark.parametrize("ctype,dtype", [("float", np.float32), ("double", np.float64), ("int", np.int32)])
def test_templates_by_name_expression(ctype, dtype):
    n = 300
    x = RNG.integers(-100, 100, n).astype(dtype)
    y = RNG.integers(-100, 100, n).astype(dtype)
    dy = dev(y)
    k = cudl.load(MISC, f"axpy<{ctype}>", name_expressions=["axpy<float>", "axpy<double>", "axpy<int>"])
    k(3, 128, (3, dev(x), dy, n))
    np.testing.assert_array_equal(host(dy), 3 * x + y)


def test_printf_is_captured(capfd):
    cudl.load(MISC, "hello")(2, 32, (7,))
    cudl.sync()
    if cudl.on_gpu():  # device printf goes through the C library's stdout buffer
        ctypes.CDLL(None).fflush(None)
    out = capfd.readouterr().out
    assert out.count("hello from block 1, n=7, pi=3.142\n") == 1


def test_aliased_arguments_share_memory():
    x = RNG.standard_normal(500).astype(np.float32)
    dx = dev(x)
    cudl.load(MISC, "in_place_scale")(4, 128, (dx, dx, 500))
    np.testing.assert_array_equal(host(dx), 2 * x)


# ------------------------------------------------------------------------------ WMMA

WMMA = r"""
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;
template <typename T, typename LayoutB>
__global__ void wmma_tile(const T* __restrict__ a, const T* __restrict__ b, const float* __restrict__ c,
                          float* __restrict__ d, int ldb) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, ldb);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    for (int i = 0; i < fc.num_elements; i++) fc.x[i] *= 0.5f;
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_col_major);
}
"""


@pytest.mark.parametrize("ctype,layout", [("__half", "row_major"), ("__half", "col_major"),
                                          ("__nv_bfloat16", "row_major")])
def test_wmma_tile(ctype, layout):
    a = RNG.standard_normal((16, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 16)).astype(np.float32)
    c = RNG.standard_normal((16, 16)).astype(np.float32)
    if ctype == "__half":
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        af, bf = a16.astype(np.float32), b16.astype(np.float32)
    else:
        a16, b16 = bf16_bits(a), bf16_bits(b)
        af = (a16.astype(np.uint32) << 16).view(np.float32)
        bf = (b16.astype(np.uint32) << 16).view(np.float32)
    b_mem = b16 if layout == "row_major" else np.ascontiguousarray(b16.T)
    d = cudl.xp.zeros((16, 16), np.float32)
    name = f"wmma_tile<{ctype}, nvcuda::wmma::{layout}>"
    cudl.load(WMMA, name)(1, 32, (dev(a16), dev(b_mem), dev(c), d, 16))
    ref = af.astype(np.float64) @ bf.astype(np.float64) + 0.5 * c
    np.testing.assert_allclose(host(d).T, ref, rtol=1e-5, atol=1e-4)  # stored column-major


# ------------------------------------------------------------------------------ more corners

CORNERS = r"""
// shared memory is per block even when blocks run at the same time
extern "C" __global__ void shared_per_block(int* __restrict__ out) {
    __shared__ int s[64];
    s[threadIdx.x] = blockIdx.x;
    __syncthreads();
    int sum = 0;
    for (int k = 0; k < blockDim.x; k++) sum += s[k];
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
// half-warp shuffles in a diverged branch, in a block whose last warp is partial (48 threads)
extern "C" __global__ void half_warp_xor(const int* __restrict__ x, int* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    int v = x[i];
    if (lane < 16) {
        for (int m = 8; m > 0; m /= 2) v += __shfl_xor_sync(0x0000ffff, v, m, 16);
        __syncwarp(0x0000ffff);
    }
    y[i] = v;
}
template <int BLOCK>
__global__ void block_index_times(int* __restrict__ out) {
    out[blockIdx.x * BLOCK + threadIdx.x] = BLOCK * 1000 + threadIdx.x;
}
// a grid far larger than the number of CPU cores, with a grid-stride loop
extern "C" __global__ void grid_stride_iota(long long* __restrict__ out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = i;
}
"""


def test_static_shared_memory_is_per_block():
    out = cudl.xp.zeros(200, np.int32)
    cudl.load(CORNERS, "shared_per_block")(200, 64, (out,))
    np.testing.assert_array_equal(host(out), np.arange(200) * 64)


def test_half_warp_shuffle_in_partial_warp():
    x = RNG.integers(-100, 100, 3 * 48).astype(np.int32)
    y = cudl.xp.zeros(3 * 48, np.int32)
    cudl.load(CORNERS, "half_warp_xor")(3, 48, (dev(x), y))
    xs = x.reshape(3, 48)
    ref = xs.copy()
    for start in (0, 32):  # the first 16 lanes of each warp sum their half-warp
        ref[:, start:start + 16] = xs[:, start:start + 16].sum(1, keepdims=True)
    np.testing.assert_array_equal(host(y), ref.ravel())


def test_template_with_int_parameter():
    out = cudl.xp.zeros(4 * 64, np.int32)
    cudl.load(CORNERS, "block_index_times<64>")(4, 64, (out,))
    np.testing.assert_array_equal(host(out), np.tile(64_000 + np.arange(64), 4))


def test_many_blocks_grid_stride():
    n = 300_001
    out = cudl.xp.zeros(n, np.int64)
    cudl.load(CORNERS, "grid_stride_iota")(1000, 128, (out, n))
    np.testing.assert_array_equal(host(out), np.arange(n))


# ------------------------------------------------------------------------------ the front end (issue 8)

FRONTEND = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
#define NT 128
typedef float real;

// pointer parameters written in every style, nested parentheses in __launch_bounds__, a typedef'd scalar
extern "C" __global__ void __launch_bounds__(NT, (NT > 64 ? 4 : 2))
axpy_styles(const real* __restrict__ x, real *const y, float *__restrict out, real a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        out[i] = a * x[i] + y[i];
}

#if 0
extern "C" __global__ void inactive(int x) { this does not compile; }
#endif

// tiles of 4, 16 and 32 threads: cg::reduce with plus / greater / less, cg::sync(tile)
extern "C" __global__ void tile_reduce(const int* __restrict__ x, int* __restrict__ out) {
    cg::thread_block block = cg::this_thread_block();
    auto t4 = cg::tiled_partition<4>(block);
    auto t16 = cg::tiled_partition<16>(block);
    cg::thread_block_tile<32> t32 = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x, v = x[i];
    int s4 = cg::reduce(t4, v, cg::plus<int>());
    cg::sync(t16);
    int m16 = cg::reduce(t16, v, cg::greater<int>());
    int n32 = cg::reduce(t32, v, cg::less<int>());
    out[3 * i] = s4; out[3 * i + 1] = m16; out[3 * i + 2] = n32;
}

// a tile shuffle of a 16-byte struct (wider than the 8 bytes __shfl_sync moves)
struct Pair { double a; long long b; };
extern "C" __global__ void wide_shuffle(const double* __restrict__ x, double* __restrict__ out) {
    auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    Pair p{x[i], (long long)i};
    Pair q = warp.shfl_down(p, 1);
    out[2 * i] = q.a; out[2 * i + 1] = (double)q.b;
}

// odd lanes only: coalesced_threads() ranks and sums the active lanes; labeled_partition groups by label
extern "C" __global__ void coalesced(const int* __restrict__ x, int* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = -1;
    if (threadIdx.x % 2 == 1) {
        cg::coalesced_group g = cg::coalesced_threads();
        out[3 * i] = g.thread_rank();
        out[3 * i + 1] = cg::reduce(g, x[i], cg::plus<int>());
        cg::coalesced_group same = cg::labeled_partition(g, x[i] % 3);
        out[3 * i + 2] = cg::reduce(same, 1, cg::plus<int>());
    }
}

// this_grid() for its facts only (no grid.sync())
extern "C" __global__ void grid_rank(long long* __restrict__ out) {
    cg::grid_group grid = cg::this_grid();
    out[grid.thread_rank()] = grid.thread_rank() + 1000 * (long long)grid.num_blocks();
}

// a 64-thread tile (above a warp): its sync orders shared memory between two warps
extern "C" __global__ void big_tile(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ float s[128];
    __shared__ cg::block_tile_memory<128> scratch;  // needed below sm_80 (a T4)
    auto tile = cg::tiled_partition<64>(cg::this_thread_block(scratch));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = x[i];
    tile.sync();
    int base = tile.meta_group_rank() * 64;
    out[i] = s[base + (tile.thread_rank() + 32) % 64];
}

// scans over a tile of 8, binary_partition, and a tile sized at run time (a thread_group)
#include <cooperative_groups/scan.h>
extern "C" __global__ void scans_and_partitions(const int* __restrict__ x, int* __restrict__ out) {
    cg::thread_block block = cg::this_thread_block();
    auto t8 = cg::tiled_partition<8>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x, v = x[i];
    out[4 * i] = cg::inclusive_scan(t8, v);
    out[4 * i + 1] = cg::exclusive_scan(t8, v, cg::plus<int>());
    cg::coalesced_group half = cg::binary_partition(t8, v % 2 == 0);
    out[4 * i + 2] = cg::reduce(half, v, cg::plus<int>());
    cg::thread_group t4 = cg::tiled_partition(block, 4);
    t4.sync();
    out[4 * i + 3] = t4.thread_rank() * 100 + t4.size();
}

// __constant__ and __device__ variables written and read from Python; a null pointer argument
__constant__ float weights[5];
__device__ unsigned int calls;
extern "C" __global__ void weighted(const float* __restrict__ x, float* __restrict__ out, float* maybe, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < 5; k++) acc += weights[k] * x[(i + k) % n];
    out[i] = acc + (maybe ? maybe[i] : 0.0f);
    atomicAdd(&calls, 1u);
}

// 2-D dynamic shared memory, declared with the qualifiers in another order
extern "C" __global__ void transpose_2d(const float* __restrict__ x, float* __restrict__ y) {
    extern float __shared__ tile[][17];
    int r = threadIdx.y, c = threadIdx.x;
    tile[r][c] = x[r * 16 + c];
    __syncthreads();
    y[r * 16 + c] = tile[c][r];
}
"""


def test_parameter_styles_and_typedef_scalar():
    n = 1000
    x, y = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    out = dev(np.full(n, np.nan, np.float32))
    cudl.load(FRONTEND, "axpy_styles")(4, 128, (dev(x), dev(y), out, 2.5, n))
    # a GPU fuses a * x + y into one FMA (one rounding), NumPy rounds twice: compare with float64 within a few
    # float32 ulps of the terms, which also holds where the two terms cancel (seen on the H100, 3 of 1000)
    ref = 2.5 * x.astype(np.float64) + y
    scale = np.abs(2.5 * x.astype(np.float64)) + np.abs(y)
    assert np.all(np.abs(host(out) - ref) <= 2 * np.finfo(np.float32).eps * scale)


def test_cg_tile_reductions():
    x = RNG.integers(-1000, 1000, 128).astype(np.int32)
    out = dev(np.zeros(3 * 128, np.int32))
    cudl.load(FRONTEND, "tile_reduce")(2, 64, (dev(x), out))
    got = host(out).reshape(128, 3)
    np.testing.assert_array_equal(got[:, 0], np.repeat(x.reshape(-1, 4).sum(1), 4))
    np.testing.assert_array_equal(got[:, 1], np.repeat(x.reshape(-1, 16).max(1), 16))
    np.testing.assert_array_equal(got[:, 2], np.repeat(x.reshape(-1, 32).min(1), 32))


def test_cg_shuffle_of_a_16_byte_struct():
    x = RNG.standard_normal(64)
    out = dev(np.zeros(128))
    cudl.load(FRONTEND, "wide_shuffle")(1, 64, (dev(x), out))
    got = host(out).reshape(64, 2)
    src = np.arange(64) + 1
    src[31::32] -= 1  # the last lane of a warp keeps its own value
    np.testing.assert_array_equal(got[:, 0], x[src])
    np.testing.assert_array_equal(got[:, 1], src)


def test_cg_coalesced_and_labeled_groups():
    x = RNG.integers(0, 100, 64).astype(np.int32)
    out = dev(np.zeros(3 * 64, np.int32))
    cudl.load(FRONTEND, "coalesced")(1, 64, (dev(x), out))
    got = host(out).reshape(64, 3)
    for w in range(2):
        lanes = np.arange(32 * w + 1, 32 * w + 32, 2)
        np.testing.assert_array_equal(got[lanes, 0], np.arange(16))
        np.testing.assert_array_equal(got[lanes, 1], x[lanes].sum())
        np.testing.assert_array_equal(got[lanes, 2], [(x[lanes] % 3 == v % 3).sum() for v in x[lanes]])
    assert (got[0::2] == -1).all()


def test_cg_scans_and_partitions():
    x = RNG.integers(0, 50, 64).astype(np.int32)
    out = dev(np.zeros(4 * 64, np.int32))
    cudl.load(FRONTEND, "scans_and_partitions")(2, 32, (dev(x), out))
    got = host(out).reshape(64, 4)
    tiles = x.reshape(-1, 8)
    inc = np.cumsum(tiles, 1)
    np.testing.assert_array_equal(got[:, 0], inc.ravel())
    np.testing.assert_array_equal(got[:, 1], (inc - tiles).ravel())
    even = np.where(tiles % 2 == 0, tiles, 0).sum(1, keepdims=True)
    odd = np.where(tiles % 2 == 1, tiles, 0).sum(1, keepdims=True)
    np.testing.assert_array_equal(got[:, 2], np.where(tiles % 2 == 0, even, odd).ravel())
    np.testing.assert_array_equal(got[:, 3], np.arange(64) % 4 * 100 + 4)


def test_cg_this_grid_without_sync():
    out = dev(np.zeros(3 * 32, np.int64))
    cudl.load(FRONTEND, "grid_rank")(3, 32, (out,))
    np.testing.assert_array_equal(host(out), np.arange(96) + 3000)


def test_cg_tile_of_64_threads():
    x = RNG.standard_normal(256).astype(np.float32)
    out = dev(np.zeros(256, np.float32))
    cudl.load(FRONTEND, "big_tile")(2, 128, (dev(x), out))
    idx = np.arange(256)
    np.testing.assert_array_equal(host(out), x[idx // 64 * 64 + (idx % 64 + 32) % 64])


def test_constant_and_device_globals_and_null_pointer():
    k = cudl.load(FRONTEND, "weighted")
    w = RNG.standard_normal(5).astype(np.float32)
    k.set_global("weights", w)
    k.get_global("calls")[...] = 0
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    out = dev(np.full(n, np.nan, np.float32))
    k(3, 128, (dev(x), out, None, n))
    ref = sum(w[j] * np.roll(x, -j) for j in range(5))
    np.testing.assert_allclose(host(out), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(cudl.to_numpy(k.get_global("weights")), w)
    assert int(cudl.to_numpy(k.get_global("calls"))) == n


def test_2d_extern_shared_array():
    x = RNG.standard_normal(256).astype(np.float32)
    y = dev(np.zeros(256, np.float32))
    cudl.load(FRONTEND, "transpose_2d")(1, (16, 16), (dev(x), y), shared_mem=16 * 17 * 4)
    np.testing.assert_array_equal(host(y), x.reshape(16, 16).T.ravel())
