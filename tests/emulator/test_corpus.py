"""Kernels written the way other people write them (CUDA samples, llm.c, PMPP, blog posts), unchanged, against
NumPy references: the emulator must run them as a GPU would (issue 8's corpus; the files are in corpus/).
Written against cudl.load / cudl.xp only, so the same file runs with CUDL_BACKEND=gpu."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cudl

CORPUS = Path(__file__).parent / "corpus"
RNG = np.random.default_rng(8)


def dev(a: np.ndarray):
    return cudl.xp.array(a)


def host(a) -> np.ndarray:
    cudl.sync()
    return cudl.to_numpy(a)


def load(file: str, name: str, **kw) -> cudl.Kernel:
    return cudl.load(str(CORPUS / file), name, **kw)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def nan(n: int, dtype=np.float32):
    return dev(np.full(n, np.nan, dtype))


def saxpy_grid_stride():
    n = 10_001
    x, y = f32(n), f32(n)
    d = dev(y)
    load("saxpy_grid_stride.cu", "saxpy")(8, 128, (n, 1.5, dev(x), d))
    return host(d), 1.5 * x + y


def vector_add_samples():
    n = 5000
    a, b = f32(n), f32(n)
    c = nan(n)
    load("vector_add_samples.cu", "vectorAdd")((n + 255) // 256, 256, (dev(a), dev(b), c, n))
    return host(c), a + b


def reduce_cg_template():
    n = 10_000
    x = f32(n)
    blocks = (n + 511) // 512
    out = nan(blocks)
    load("reduce_cg_template.cu", "reduce4<float, 256>")(blocks, 256, (dev(x), out, n))
    return host(out), np.add.reduceat(x.astype(np.float64), np.arange(0, n, 512))


def llmc_layernorm():
    n, c = 37, 96
    x, w, b = f32(n, c), f32(c), f32(c)
    out, mean, rstd = nan(n * c), nan(n), nan(n)
    load("llmc_layernorm.cu", "layernorm_forward_kernel3")((n + 3) // 4, 128,
                                                           (out, mean, rstd, dev(x), dev(w), dev(b), n, c))
    xd = x.astype(np.float64)
    m, v = xd.mean(1), xd.var(1)
    ref = (xd - m[:, None]) / np.sqrt(v[:, None] + 1e-5) * w + b
    return np.concatenate([host(out), host(mean), host(rstd)]), np.concatenate(
        [ref.ravel(), m, 1 / np.sqrt(v + 1e-5)])


def llmc_softmax():
    n, c = 20, 70
    x = f32(n, c) * 3
    out = nan(n * c)
    load("llmc_softmax.cu", "softmax_forward_kernel7")((n + 3) // 4, 128, (out, dev(x), n, c))
    e = np.exp(x - x.max(1, keepdims=True))
    return host(out), (e / e.sum(1, keepdims=True)).ravel()


def llmc_gelu():
    n = 3000
    x = f32(n)
    out = nan(n)
    load("llmc_gelu.cu", "gelu_forward_kernel")((n + 127) // 128, 128, (out, dev(x), n))
    xd = x.astype(np.float64)
    return host(out), 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)))


def pmpp_matmul_tiled():
    w = 40
    m, nn = f32(w, w), f32(w, w)
    p = nan(w * w)
    load("pmpp_matmul_tiled.cu", "matrixMulKernel")((3, 3), (16, 16), (dev(m), dev(nn), p, w))
    return host(p), (m.astype(np.float64) @ nn).ravel()


def pmpp_conv2d_constant():
    h, w = 30, 45
    img, filt = f32(h, w), f32(5, 5)
    k = load("pmpp_conv2d_constant.cu", "convolution_2D_const_mem_kernel")
    k.set_global("F", filt)
    out = nan(h * w)
    k(((w + 15) // 16, (h + 15) // 16), (16, 16), (dev(img), out, w, h))
    pad = np.pad(img.astype(np.float64), 2)
    ref = sum(filt[r, c] * pad[r:r + h, c:c + w] for r in range(5) for c in range(5))
    return host(out), ref.ravel()


def pmpp_histogram_private():
    text = RNG.integers(ord("a") - 5, ord("z") + 5, 20_000).astype(np.int8)
    histo = dev(np.zeros(7, np.uint32))
    load("pmpp_histogram_private.cu", "histo_private_kernel")(16, 128, (dev(text), len(text), histo))
    pos = text.astype(int) - ord("a")
    return host(histo), np.bincount(pos[(pos >= 0) & (pos < 26)] // 4, minlength=7)


def pmpp_scan_kogge_stone():
    n = 1000
    x = f32(n)
    y = nan(n)
    load("pmpp_scan_kogge_stone.cu", "Kogge_Stone_scan_kernel")((n + 255) // 256, 256, (dev(x), y, n))
    ref = np.concatenate([np.cumsum(x[s:s + 256].astype(np.float64)) for s in range(0, n, 256)])
    return host(y), ref


def transpose_samples():
    h, w = 64, 96
    a = f32(h, w)
    out = nan(h * w)
    load("transpose_samples.cu", "transposeNoBankConflicts")((w // 32, h // 32), (32, 8), (out, dev(a), w, h))
    return host(out), a.T.ravel()


def template_functor():
    n = 777
    x = f32(n).astype(np.float64)
    out = nan(2 * n, np.float64)
    names = ["apply<double, Relu>", "apply<double, Square>"]
    for k, name in enumerate(names):
        y = nan(n, np.float64)
        load("template_functor.cu", name, name_expressions=names)(7, 128, (dev(x), y, n))
        out[k * n:(k + 1) * n] = y
    return host(out), np.concatenate([np.maximum(x, 0), x * x])


def launch_bounds_unroll():
    n = 4099
    x = f32(n)
    y = nan(n)
    load("launch_bounds_unroll.cu", "scale_strip")((n + 1023) // 1024, 256, (dev(x), y, -2.0, n))
    return host(y), -2.0 * x


def half2_add():
    n = 2048
    a, b = f32(n).astype(np.float16), f32(n).astype(np.float16)
    c = nan(n, np.float16)
    load("half2_add.cu", "add_half2")(n // 2 // 128, 128, (dev(a), dev(b), c, n // 2))
    return host(c).astype(np.float64), (a + b).astype(np.float64)


def dynamic_smem_reduce():
    n = 3000
    x = RNG.integers(-100, 100, n).astype(np.int32)
    out = dev(np.zeros(12, np.int32))
    load("dynamic_smem_reduce.cu", "reduce0")(12, 256, (dev(x), out, n), shared_mem=256 * 4)
    return host(out), np.add.reduceat(np.concatenate([x, np.zeros(72, np.int32)]), np.arange(0, 3072, 256))


def warp_argmax():
    rows, cols = 50, 300
    x = f32(rows, cols)
    out = dev(np.full(rows, -1, np.int32))
    load("warp_argmax.cu", "row_argmax")(rows, 32, (dev(x), out, cols))
    return host(out), x.argmax(1)


def float4_scale():
    n = 4096
    x = f32(n)
    y = nan(n)
    load("float4_scale.cu", "scale_float4")(n // 4 // 128, 128, (dev(x), y, 0.5, n))
    return host(y), 0.5 * x


def stencil_1d():
    n = 128 * 6
    x = RNG.integers(-50, 50, n + 6).astype(np.int32)
    out = dev(np.zeros(n, np.int32))
    load("stencil_1d.cu", "stencil_1d")(6, 128, (dev(x), out))
    return host(out), np.convolve(x, np.ones(7, np.int32), "valid")


def compact_coalesced():
    n = 2000
    x = f32(n)
    dst, count = nan(n), dev(np.zeros(1, np.int32))
    load("compact_coalesced.cu", "filter_positive")((n + 127) // 128, 128, (dev(x), dst, count, n))
    k = int(host(count)[0])
    return np.sort(host(dst)[:k]), np.sort(x[x > 0])


def arch_guards():
    n = 999
    a, b, c = f32(n), f32(n), f32(n)
    d = dev(c)
    load("arch_guards.cu", "fused_multiply_add")(8, 128, (dev(a), dev(b), d, n))
    return host(d), a.astype(np.float64) * b + c


def typedef_double_axpby():
    n = 1234
    x, y = RNG.standard_normal(n), RNG.standard_normal(n)
    d = dev(y)
    load("typedef_double_axpby.cu", "axpby")(10, 128, (2.0, dev(x), -0.5, d, n))
    return host(d), 2.0 * x - 0.5 * y


def block_tile_128():
    x = f32(3 * 256)
    out = nan(6)
    load("block_tile_128.cu", "tile_sums")(3, 256, (dev(x), out))
    return host(out), x.astype(np.float64).reshape(6, 128).sum(1)


CASES = [saxpy_grid_stride, vector_add_samples, reduce_cg_template, llmc_layernorm, llmc_softmax, llmc_gelu,
         pmpp_matmul_tiled, pmpp_conv2d_constant, pmpp_histogram_private, pmpp_scan_kogge_stone, transpose_samples,
         template_functor, launch_bounds_unroll, half2_add, dynamic_smem_reduce, warp_argmax, float4_scale,
         stencil_1d, compact_coalesced, arch_guards, typedef_double_axpby, block_tile_128]


def test_every_corpus_file_has_a_case():
    assert sorted(p.stem for p in CORPUS.glob("*.cu")) == sorted(c.__name__ for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_corpus_kernel_unchanged(case):
    got, ref = case()
    assert got.shape == np.shape(ref) and np.isfinite(got.astype(np.float64)).all()
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3 if got.dtype == np.float16 else 1e-4,
                               atol=1e-3 if got.dtype == np.float16 else 1e-5)
