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
