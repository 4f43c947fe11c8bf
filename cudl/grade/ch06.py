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
from cudl.grade.guard import check_guard, guarded, guarded_output

GUARD = 64  # poisoned elements after each input and output
# fp32 sums of up to C R S = 2304 terms: rounding error grows like sqrt(C R S) ulp; wrong kernels are off by O(1).
RTOL = 4e-5


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


@grader("conv2d_tiled", kernels=["conv2d_tiled"], rtol=RTOL,
        cases=[dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1, pad=0), dict(N=1, C=2, H=5, W=7, K=3, R=3, S=3, pad=1),
               dict(N=2, C=3, H=16, W=16, K=4, R=3, S=3, pad=1), dict(N=1, C=2, H=33, W=20, K=3, R=5, S=5, pad=2),
               dict(N=2, C=4, H=19, W=23, K=3, R=3, S=5, pad=0), dict(N=8, C=64, H=56, W=56, K=32, R=3, S=3, pad=1)],
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
              "y[n][k][p][q] only if p < P and q < Q"])
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
    return [(out, conv2d_reference(x, w, 1, pad).ravel())]


# ------------------------------------------------------------------------------ conv2d_backward_input

BLOCK = 256  # conv2d_backward_input: one thread per element of dx


@grader("conv2d_backward_input", kernels=["conv2d_backward_input"], rtol=RTOL,
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
              "same r, s that produced y)"])
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
    return [(out, conv2d_backward_input_reference(dy, w, H, W, stride, pad, dil).ravel())]
