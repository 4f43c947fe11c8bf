"""Graders of chapter 6 (convolution): a shared-memory tiled conv2d with halo, and the input gradient of a
conv2d (backward for the input, with stride, padding and dilation). Also the float64 reference convolution
that the chapter, these graders and tests/kernels/test_06_convolution.py share.

Inputs are followed in memory by NaN (a kernel that reads past the end gets NaN into its result) and
outputs by a poisoned guard zone (a kernel that writes past the end is caught).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.checks import fp32_sum_rtol
from cudl.grade.guard import check_guard, guarded, guarded_output

GUARD = 64  # poisoned elements after each input and output
# Every output is an fp32 sum of at most C R S (or K R S) products: it is within fp32_sum_rtol(terms) times the
# sum of |x w| over its taps (the same convolution of |x| and |w|) of the exact value, in any order of the sum.


def out_size(size: int, r: int, stride: int = 1, pad: int = 0, dil: int = 1) -> int:
    """Output length along one axis: floor((size + 2 pad - dil (r - 1) - 1) / stride) + 1."""
    return (size + 2 * pad - dil * (r - 1) - 1) // stride + 1


def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0, dil: int = 1,
                     groups: int = 1) -> np.ndarray:
    """y[n, k, p, q] = sum over c, r, s of x[n, c, p stride - pad + r dil, q stride - pad + s dil] w[k, c, r, s],
    in float64 (NCHW; x is zero outside the image). With groups = C and w of shape C x 1 x R x S: depthwise."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    P, Q = out_size(H, R, stride, pad, dil), out_size(W, S, stride, pad, dil)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    y = np.zeros((N, K, P, Q))
    for r in range(R):
        for s in range(S):
            # The input each output's tap (r, s) reads: a strided window of the padded image, N x C x P x Q.
            tap = xp[:, :, r * dil: r * dil + stride * (P - 1) + 1: stride,
                     s * dil: s * dil + stride * (Q - 1) + 1: stride]
            if groups == 1:
                y += np.einsum("ncpq,kc->nkpq", tap, w[:, :, r, s])
            else:  # depthwise: output channel k reads input channel k only
                y += tap * w[:, 0, r, s][None, :, None, None]
    return y


def conv2d_backward_input_reference(dy: np.ndarray, w: np.ndarray, H: int, W: int, stride: int = 1,
                                    pad: int = 0, dil: int = 1) -> np.ndarray:
    """dx = d(sum(y * dy)) / dx for y = conv2d(x, w): every output's gradient flows back to the inputs it read."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    N, K, P, Q = dy.shape
    _, C, R, S = w.shape
    dxp = np.zeros((N, C, H + 2 * pad, W + 2 * pad))
    for r in range(R):
        for s in range(S):
            dxp[:, :, r * dil: r * dil + stride * (P - 1) + 1: stride,
                s * dil: s * dil + stride * (Q - 1) + 1: stride] += np.einsum("nkpq,kc->ncpq", dy, w[:, :, r, s])
    return dxp[:, :, pad: pad + H, pad: pad + W]


def _randn(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------------ conv2d_tiled

TILE = 16  # conv2d_tiled: blocks of TILE x TILE threads, one output pixel each


# The exercise allows filters up to 7 x 7: both backends have a 7 x 7 case (a patch sized for 5 x 5 overflows).
@grader("conv2d_tiled", kernels=["conv2d_tiled"],
        cases=[dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1, pad=0), dict(N=1, C=2, H=5, W=7, K=3, R=3, S=3, pad=1),
               dict(N=2, C=3, H=16, W=16, K=4, R=3, S=3, pad=1), dict(N=1, C=2, H=33, W=20, K=3, R=7, S=7, pad=3),
               dict(N=2, C=4, H=19, W=23, K=3, R=5, S=3, pad=0), dict(N=8, C=64, H=56, W=56, K=32, R=3, S=3, pad=1)],
        emulator_cases=[dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1, pad=0),
                        dict(N=1, C=2, H=5, W=7, K=3, R=3, S=3, pad=1),
                        dict(N=2, C=3, H=16, W=16, K=4, R=3, S=3, pad=1),
                        dict(N=1, C=2, H=33, W=20, K=3, R=5, S=5, pad=2),
                        dict(N=2, C=4, H=19, W=23, K=3, R=3, S=5, pad=0),
                        dict(N=1, C=5, H=18, W=35, K=2, R=7, S=7, pad=3)],
        hint=["the input patch of a 16 x 16 output tile is (16 + R - 1) x (16 + S - 1): the tile plus its halo; "
              "load all of it (several elements per thread), with zeros where it lies in the padding",
              "per input channel c: every thread copies elements j = tid, tid + 256, ... of the patch, "
              "xs[j / IW][j % IW] = x[n][c][h][w] with h = p0 - pad + j / IW, w = q0 - pad + j % IW (0 outside "
              "the image); __syncthreads(); add xs[ty + r][tx + s] * w[k][c][r][s]; __syncthreads(); store "
              "y[n][k][p][q] only if p < P and q < Q",
              "common slips: the patch's origin is (p0 - pad, q0 - pad), not (p0, q0); the tap is xs[ty + r][tx + s] "
              "with the filter NOT flipped (w[k][c][r][s]); the second __syncthreads() keeps fast threads from "
              "overwriting the patch of channel c while slow ones still read it"])
def conv2d_tiled(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    N, C, H, W, K, R, S, pad = (case[k] for k in ("N", "C", "H", "W", "K", "R", "S", "pad"))
    P, Q = out_size(H, R, 1, pad), out_size(W, S, 1, pad)
    x, w = _randn(N, C, H, W), _randn(K, C, R, S)
    x_dev, w_dev = guarded(x, guard=GUARD)[0], guarded(w, guard=GUARD)[0]
    out, buf = guarded_output(N * K * P * Q, guard=GUARD)
    grid = ((Q + TILE - 1) // TILE, (P + TILE - 1) // TILE, N * K)
    load("conv2d_tiled")(grid, (TILE, TILE), (N, C, H, W, K, R, S, pad, x_dev, w_dev, out))
    cudl.sync()
    check_guard(buf, N * K * P * Q, "y")
    terms = conv2d_reference(np.abs(x), np.abs(w), 1, pad).ravel()
    return [(out, conv2d_reference(x, w, 1, pad).ravel(), terms, fp32_sum_rtol(C * R * S))]


# ------------------------------------------------------------------------------ conv2d_backward_input

BLOCK = 256  # conv2d_backward_input: one thread per element of dx


@grader("conv2d_backward_input", kernels=["conv2d_backward_input"],
        cases=[dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1, stride=1, pad=0, dil=1),
               dict(N=2, C=3, H=7, W=9, K=4, R=3, S=3, stride=1, pad=1, dil=1),
               dict(N=1, C=2, H=10, W=11, K=3, R=3, S=3, stride=2, pad=1, dil=1),
               dict(N=2, C=3, H=9, W=8, K=5, R=3, S=2, stride=2, pad=2, dil=2),
               dict(N=1, C=4, H=13, W=13, K=2, R=5, S=5, stride=3, pad=1, dil=1),
               dict(N=16, C=64, H=28, W=28, K=32, R=3, S=3, stride=2, pad=1, dil=1)],
        emulator_cases=[dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1, stride=1, pad=0, dil=1),
                        dict(N=2, C=3, H=7, W=9, K=4, R=3, S=3, stride=1, pad=1, dil=1),
                        dict(N=1, C=2, H=10, W=11, K=3, R=3, S=3, stride=2, pad=1, dil=1),
                        dict(N=2, C=3, H=9, W=8, K=5, R=3, S=2, stride=2, pad=2, dil=2),
                        dict(N=1, C=4, H=13, W=13, K=2, R=5, S=5, stride=3, pad=1, dil=1),
                        dict(N=2, C=6, H=12, W=10, K=7, R=3, S=3, stride=2, pad=1, dil=1)],
        hint=["input (h, w) received gradient from output (p, q) through tap (r, s) exactly when "
              "h = p stride - pad + r dil: so p = (h + pad - r dil) / stride, and only if that division is exact "
              "and 0 <= p < P (same for w, q, s)",
              "one thread per dx[n][c][h][w]: sum over k, r, s; compute hh = h + pad - r * dil and skip the tap "
              "unless hh >= 0, hh % stride == 0 and hh / stride < P (test hh >= 0 first: C's / and % truncate "
              "toward zero); add dy[n][k][p][q] * w[k][c][r][s] (not the flipped filter: w is indexed by the "
              "same r, s that produced y)",
              "the loops: for r: hh = h + pad - r * dil; if (hh < 0 || hh % stride || hh / stride >= P) continue; "
              "p = hh / stride; for s: the same with ww, dil and Q; for k: acc += dy[((n * K + k) * P + p) * Q + q] "
              "* w[((k * C + c) * R + r) * S + s]; finally dx[i] = acc (every thread writes its element, 0 "
              "included)"])
def conv2d_backward_input(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    N, C, H, W, K, R, S = (case[k] for k in ("N", "C", "H", "W", "K", "R", "S"))
    stride, pad, dil = case["stride"], case["pad"], case["dil"]
    P, Q = out_size(H, R, stride, pad, dil), out_size(W, S, stride, pad, dil)
    dy, w = _randn(N, K, P, Q), _randn(K, C, R, S)
    dy_dev, w_dev = guarded(dy, guard=GUARD)[0], guarded(w, guard=GUARD)[0]
    out, buf = guarded_output(N * C * H * W, guard=GUARD)
    grid = ((N * C * H * W + BLOCK - 1) // BLOCK,)
    load("conv2d_backward_input")(grid, (BLOCK,), (N, C, H, W, K, R, S, P, Q, stride, pad, dil, dy_dev,
                                                   w_dev, out))
    cudl.sync()
    check_guard(buf, N * C * H * W, "dx")
    terms = conv2d_backward_input_reference(np.abs(dy), np.abs(w), H, W, stride, pad, dil).ravel()
    return [(out, conv2d_backward_input_reference(dy, w, H, W, stride, pad, dil).ravel(), terms,
             fp32_sum_rtol(K * R * S))]


# ------------------------------------------------------------------------------ challenge: depthwise 3x3, NHWC

DW_BLOCK = 256  # depthwise_nhwc: one thread per output element, flat index with the channel fastest


def depthwise_nhwc_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """y[n, h, w, c] = sum over r, s of x[n, h - 1 + r, w - 1 + s, c] w[r, s, c] (zero padding 1), float64."""
    xn = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))  # NHWC -> NCHW
    wn = np.transpose(w, (2, 0, 1))[:, None]  # R x S x C -> C x 1 x R x S
    return np.transpose(conv2d_reference(xn, wn, 1, 1, 1, groups=x.shape[3]), (0, 2, 3, 1))


@grader("depthwise_nhwc", kernels=["depthwise_nhwc"],
        cases=[dict(N=1, H=1, W=1, C=1), dict(N=1, H=2, W=3, C=5), dict(N=2, H=7, W=5, C=33),
               dict(N=1, H=16, W=16, C=64), dict(N=3, H=9, W=13, C=100), dict(N=8, H=56, W=56, C=144)],
        emulator_cases=[dict(N=1, H=1, W=1, C=1), dict(N=1, H=2, W=3, C=5), dict(N=2, H=7, W=5, C=33),
                        dict(N=1, H=16, W=16, C=64), dict(N=3, H=9, W=13, C=100), dict(N=1, H=12, W=10, C=96)],
        speed=dict(case=dict(N=8, H=56, W=56, C=144), factor=2, bytes=2 * 4 * 8 * 56 * 56 * 144 + 4 * 9 * 144),
        hint=["depthwise: output channel c reads input channel c only, 9 taps around (h, w) with zeros outside "
              "the image; in NHWC the channel is the fastest index, so neighbouring threads should take "
              "neighbouring channels of the same pixel (that is what makes the loads coalesced)",
              "i = blockIdx.x * blockDim.x + threadIdx.x (return if i >= N H W C); c = i % C, then w, h, n from "
              "i / C; for r, s in 0..2: hh = h - 1 + r, ww = w - 1 + s, skip the tap if hh or ww is outside "
              "[0, H) x [0, W)",
              "add x[((n * H + hh) * W + ww) * C + c] * w[(r * 3 + s) * C + c] (the filter is 3 x 3 x C, "
              "channel fastest too) and store y[i]; the index c must not be the slowest one, or a warp's 32 loads "
              "are C floats apart"])
def depthwise_nhwc(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """y = depthwise 3x3 conv (stride 1, padding 1) of x, all NHWC; w is 3 x 3 x C; grid ceil(NHWC / 256)."""
    N, H, W, C = (case[k] for k in ("N", "H", "W", "C"))
    x, w = _randn(N, H, W, C), _randn(3, 3, C)
    x_dev, w_dev = guarded(x, guard=GUARD)[0], guarded(w, guard=GUARD)[0]
    size = N * H * W * C
    out, buf = guarded_output(size, guard=GUARD)
    load("depthwise_nhwc")(((size + DW_BLOCK - 1) // DW_BLOCK,), (DW_BLOCK,), (N, H, W, C, x_dev, w_dev, out))
    cudl.sync()
    check_guard(buf, size, "y")
    terms = depthwise_nhwc_reference(np.abs(x), np.abs(w)).ravel()
    return [(out, depthwise_nhwc_reference(x, w).ravel(), terms, fp32_sum_rtol(9))]
