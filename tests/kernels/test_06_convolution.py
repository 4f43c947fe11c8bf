"""Chapter 6 kernels against the float64 reference convolution: fresh random inputs, NaN-poisoned outputs
with a guard zone, odd shapes, stride, padding and dilation, NCHW and NHWC.

Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.grade.ch06 import conv2d_reference, out_size

GUARD = 64  # NaN elements after each input and output
DIR = "06-convolution"

# (N, C, H, W, K, R, S, stride, pad, dil): odd sizes, non-square images and filters, 1 x 1 filters,
# outputs of one pixel, more channels than one tile (K > 128, N P Q > 128), C not a multiple of 4.
SHAPES = [
    (2, 5, 11, 13, 7, 3, 3, 1, 1, 1),
    (3, 8, 9, 7, 130, 3, 3, 2, 1, 1),
    (1, 3, 17, 10, 5, 5, 3, 1, 2, 2),
    (2, 6, 8, 8, 9, 1, 1, 1, 0, 1),
    (1, 4, 5, 5, 3, 5, 5, 1, 0, 1),
    (2, 12, 15, 15, 16, 3, 3, 3, 0, 1),
    (1, 7, 10, 12, 4, 2, 4, 2, 3, 3),
]


def guarded(data: np.ndarray):
    """`data` on the backend followed by GUARD NaNs: a kernel that reads past the end gets NaN."""
    buf = cudl.poisoned(data.size + GUARD)
    buf[: data.size] = cudl.xp.asarray(data.ravel())
    return buf[: data.size], buf


def make_case(shape):
    N, C, H, W, K, R, S, stride, pad, dil = shape
    rng = np.random.default_rng()
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, R, S)).astype(np.float32)
    P, Q = out_size(H, R, stride, pad, dil), out_size(W, S, stride, pad, dil)
    return x, w, P, Q, conv2d_reference(x, w, stride, pad, dil)


def check_output(y_buf, size: int, got: np.ndarray, ref: np.ndarray, what: str) -> None:
    c = cudl.compare(got, ref)
    assert c.ok, f"{what}: {c}"
    assert np.isnan(cudl.to_numpy(y_buf)[size:]).all(), f"{what} wrote past the end of y"


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_direct(shape):
    N, C, H, W, K, R, S, stride, pad, dil = shape
    x, w, P, Q, ref = make_case(shape)
    X, _ = guarded(x)
    Wt, _ = guarded(w)
    Y, ybuf = guarded(np.full(N * K * P * Q, np.nan, np.float32))
    k = cudl.load(f"{DIR}/conv2d_1_direct.cu", "conv2d_1_direct")
    k((cdiv(N * K * P * Q, 256),), (256,), (N, C, H, W, K, R, S, P, Q, stride, pad, dil, X, Wt, Y))
    check_output(ybuf, Y.size, cudl.to_numpy(Y).reshape(ref.shape), ref, f"direct {shape}")


@pytest.mark.parametrize("kb", [8, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_smem_tiled(shape, kb):
    N, C, H, W, K, R, S, stride, pad, dil = shape
    x, w, P, Q, ref = make_case(shape)
    X, _ = guarded(x)
    Wt, _ = guarded(w)
    Y, ybuf = guarded(np.full(N * K * P * Q, np.nan, np.float32))
    k = cudl.load(f"{DIR}/conv2d_2_smem_tiled.cu", "conv2d_2_smem_tiled", options=[f"-DKB={kb}"])
    IH, IW = 15 * stride + (R - 1) * dil + 1, 15 * stride + (S - 1) * dil + 1
    k((cdiv(P, 16) * cdiv(Q, 16), cdiv(K, kb), N), (16, 16),
      (N, C, H, W, K, R, S, P, Q, stride, pad, dil, X, Wt, Y), shared_mem=4 * (IH * IW + kb * R * S))
    check_output(ybuf, Y.size, cudl.to_numpy(Y).reshape(ref.shape), ref, f"smem tiled {shape}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_im2col_gemm(shape):
    """im2col, then chapter 5's matmul_8 (loaded from its own folder), then back to NCHW."""
    N, C, H, W, K, R, S, stride, pad, dil = shape
    x, w, P, Q, ref = make_case(shape)
    X, _ = guarded(x)
    Wt, _ = guarded(w)
    CRS, NPQ = C * R * S, N * P * Q
    col, col_buf = guarded(np.full(CRS * NPQ, np.nan, np.float32))
    im2col = cudl.load(f"{DIR}/conv2d_3_im2col.cu", "im2col")
    im2col((cdiv(CRS * NPQ, 256),), (256,), (N, C, H, W, R, S, P, Q, stride, pad, dil, X, col))
    assert np.isnan(cudl.to_numpy(col_buf)[col.size:]).all(), "im2col wrote past the end of col"
    yt = cudl.poisoned(K * NPQ)
    gemm = cudl.load("05-matmul/matmul_8_double_buffered.cu", "matmul_8_double_buffered")
    gemm((cdiv(NPQ, 256), cdiv(K, 128)), (256,), (K, NPQ, CRS, Wt, col, yt))
    Y, ybuf = guarded(np.full(N * K * P * Q, np.nan, np.float32))
    back = cudl.load(f"{DIR}/conv2d_3_im2col.cu", "cnhw_to_nchw")
    back((cdiv(N * K * P * Q, 256),), (256,), (N, K, P * Q, yt, Y))
    check_output(ybuf, Y.size, cudl.to_numpy(Y).reshape(ref.shape), ref, f"im2col + GEMM {shape}")


# Tile shapes of the implicit GEMM (BM, BN, BK, WM, WN, WNITER, TM, TN), as in the chapter's sweep.
TILES = [(64, 64, 16, 32, 32, 2, 4, 4), (64, 128, 16, 32, 64, 2, 8, 4), (128, 64, 16, 64, 32, 2, 8, 4),
         (128, 128, 16, 64, 32, 2, 8, 4), (128, 256, 16, 64, 64, 4, 8, 4), (128, 128, 8, 64, 32, 2, 8, 4)]


def implicit_gemm(tile, nhwc: int):
    BM, BN, BK, WM, WN, WNITER, TM, TN = tile
    threads = 32 * (BM // WM) * (BN // WN)
    consts = dict(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, WNITER=WNITER, TM=TM, TN=TN, NUM_THREADS=threads,
                  NHWC=nhwc)
    k = cudl.load(f"{DIR}/conv2d_4_implicit_gemm.cu", "conv2d_4_implicit_gemm",
                  options=[f"-D{key}={v}" for key, v in consts.items()])
    return k, threads


@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
def test_implicit_gemm(tile, nhwc):
    for shape in SHAPES if tile == TILES[0] else SHAPES[:3]:
        N, C, H, W, K, R, S, stride, pad, dil = shape
        x, w, P, Q, ref = make_case(shape)
        if nhwc:  # channels last: x N x H x W x C, w K x R x S x C, y N x P x Q x K
            x, w = x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1)
        X, _ = guarded(np.ascontiguousarray(x))
        Wt, _ = guarded(np.ascontiguousarray(w))
        Y, ybuf = guarded(np.full(N * K * P * Q, np.nan, np.float32))
        k, threads = implicit_gemm(tile, nhwc)
        k((cdiv(N * P * Q, tile[1]), cdiv(K, tile[0])), (threads,),
          (N, C, H, W, K, R, S, P, Q, stride, pad, dil, X, Wt, Y))
        got = cudl.to_numpy(Y).reshape((N, P, Q, K) if nhwc else (N, K, P, Q))
        check_output(ybuf, Y.size, got.transpose(0, 3, 1, 2) if nhwc else got, ref,
                     f"implicit GEMM {'NHWC' if nhwc else 'NCHW'} {tile} {shape}")


# (N, C, H, W, stride, pad): MobileNet-like planes shrunk, Q not a multiple of 4, stride 2 and 3, pad 0 and 2.
DEPTHWISE = [(2, 3, 12, 12, 1, 1), (1, 5, 7, 7, 1, 1), (2, 4, 13, 9, 2, 1), (1, 3, 10, 11, 2, 0),
             (1, 2, 9, 14, 3, 1), (2, 3, 6, 5, 1, 2), (1, 1, 1, 1, 1, 1), (1, 2, 8, 16, 1, 1)]


@pytest.mark.parametrize("rows,outs", [(4, 4), (1, 4), (2, 8), (3, 2)])
@pytest.mark.parametrize("shape", DEPTHWISE, ids=lambda s: "x".join(map(str, s)))
def test_depthwise(shape, rows, outs):
    N, C, H, W, stride, pad = shape
    rng = np.random.default_rng()
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
    P, Q = out_size(H, 3, stride, pad), out_size(W, 3, stride, pad)
    ref = conv2d_reference(x, w, stride, pad, groups=C)
    X, _ = guarded(x)
    Wt, _ = guarded(w)
    Y, ybuf = guarded(np.full(N * C * P * Q, np.nan, np.float32))
    k = cudl.load(f"{DIR}/conv2d_5_depthwise.cu", "conv2d_5_depthwise", options=[f"-DOUTS={outs}", f"-DROWS={rows}"])
    k((cdiv(N * C * cdiv(P, rows) * cdiv(Q, outs), 256),), (256,), (N, C, H, W, P, Q, stride, pad, X, Wt, Y))
    check_output(ybuf, Y.size, cudl.to_numpy(Y).reshape(ref.shape), ref, f"depthwise {shape}")


def test_backward_reference_is_the_adjoint():
    """<conv2d(x, w), dy> = <x, dx(dy, w)> for any x, dy: the graders' input-gradient reference is right."""
    from cudl.grade.ch06 import conv2d_backward_input_reference

    rng = np.random.default_rng()
    for N, C, H, W, K, R, S, stride, pad, dil in SHAPES:
        x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((K, C, R, S))
        y = conv2d_reference(x, w, stride, pad, dil)
        dy = rng.standard_normal(y.shape)
        dx = conv2d_backward_input_reference(dy, w, H, W, stride, pad, dil)
        assert np.isclose((y * dy).sum(), (x * dx).sum(), rtol=1e-10)


def test_reference_matches_a_direct_loop():
    """The vectorized reference against the definition, written as plain loops, on one odd case."""
    rng = np.random.default_rng()
    N, C, H, W, K, R, S, stride, pad, dil = 1, 2, 7, 6, 2, 3, 2, 2, 2, 2
    x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((K, C, R, S))
    y = conv2d_reference(x, w, stride, pad, dil)
    for n, k, p, q in np.ndindex(*y.shape):
        acc = 0.0
        for c, r, s in np.ndindex(C, R, S):
            h, ww = p * stride - pad + r * dil, q * stride - pad + s * dil
            if 0 <= h < H and 0 <= ww < W:
                acc += x[n, c, h, ww] * w[k, c, r, s]
        assert np.isclose(y[n, k, p, q], acc)
