"""Graders of chapter 1 (01-first-kernel): SAXPY, RGB to gray on a 2D grid, a grid-stride loop, and the
challenge: a float4 grid-stride multiply-add with a scalar tail.

Every output buffer is followed by a guard region of known values. A GPU rarely faults on a write a few
elements past the end of an array (allocations are rounded up), so a kernel without a bounds check would
otherwise pass there; the guard turns such a write into a CRASH line on both backends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cudl.grade import grader
from cudl.grade.guard import GUARD, check_guard, guarded, guarded_output

THREADS = 256  # block size of the 1D launches (SAXPY)
TILE = 16  # the 2D launches use TILE x TILE blocks
GRID_STRIDE_LAUNCH = ((4,), (128,))  # scale_shift: 512 threads in all, fewer than most cases' elements


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ------------------------------------------------------------------------------ SAXPY

@grader("saxpy", kernels=["saxpy"],
        cases=[dict(n=1), dict(n=31), dict(n=1000), dict(n=65536), dict(n=2**20 + 7), dict(n=2**24 + 1)],
        emulator_cases=[dict(n=1), dict(n=31), dict(n=1000), dict(n=4096), dict(n=20001), dict(n=65537)],
        hint=["each thread updates one element, the one at its global index; the last block reaches past n",
              "the global index is the block's index times the block size plus the thread's index in the block; "
              "threads whose index is n or more must not touch memory",
              "i = blockIdx.x * blockDim.x + threadIdx.x, and only if i < n: y[i] = a * x[i] + y[i]"])
def saxpy(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """y = a * x + y in place; launched with ceil(n / 256) blocks of 256 threads."""
    n = case["n"]
    rng = np.random.default_rng()
    a = np.float32(rng.uniform(0.5, 2.0) * rng.choice([-1.0, 1.0]))  # |a| >= 0.5: a write past the end shows
    x_host = rng.standard_normal(n).astype(np.float32)
    y_host = rng.standard_normal(n).astype(np.float32)
    x, _ = guarded(x_host, 1.0)
    y, y_full = guarded(y_host, 1.0)  # a stray y[i] = a * 1 + 1 changes the guard
    load("saxpy")((_cdiv(n, THREADS),), (THREADS,), (n, a, x, y))
    check_guard(y_full, n, "y", fill=1.0)
    ax = a * x_host.astype(np.float64)
    # relative to |a x| + |y|: an element where the two cancel to ~0 is rounded relative to them (one n = 1 draw in
    # about a thousand, without FMA as on the emulator, fails a tolerance relative to the result)
    return [(y, ax + y_host, np.abs(ax) + np.abs(y_host))]


# ------------------------------------------------------------------------------ RGB to gray (2D)

GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114])  # ITU-R BT.601 luma weights of R, G, B


@grader("rgb_to_gray", kernels=["rgb_to_gray"],
        cases=[dict(height=1, width=1), dict(height=1, width=300), dict(height=300, width=1),
               dict(height=33, width=47), dict(height=720, width=1281), dict(height=1079, width=1921)],
        emulator_cases=[dict(height=1, width=1), dict(height=1, width=37), dict(height=37, width=1),
                        dict(height=33, width=47), dict(height=64, width=100), dict(height=101, width=131)],
        hint=["x runs along columns and y along rows, and the grid overhangs the image on both edges: check "
              "both coordinates; the three channels of a pixel are next to each other",
              "col comes from the .x indices and row from the .y indices (blockIdx, blockDim, threadIdx); pixel "
              "(row, col) is element row * width + col of gray, and 3 times that of rgb",
              "col = blockIdx.x * blockDim.x + threadIdx.x and row = blockIdx.y * blockDim.y + threadIdx.y; "
              "check row < height and col < width; pixel (row, col) is gray[row * width + col] and its "
              "channels are rgb[3 * (row * width + col) + 0, 1, 2]"])
def rgb_to_gray(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """gray = 0.299 R + 0.587 G + 0.114 B for an H x W x 3 uint8 image; 16 x 16 blocks on a 2D grid."""
    h, w = case["height"], case["width"]
    rng = np.random.default_rng()
    rgb_host = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    overrun = TILE * (w + TILE) + GUARD  # what a kernel without a row check can reach past the end
    rgb, _ = guarded(rgb_host, 255, guard=3 * overrun)
    gray, gray_full = guarded_output((h, w), fill=-1.0, guard=overrun)  # gray >= 0
    load("rgb_to_gray")((_cdiv(w, TILE), _cdiv(h, TILE)), (TILE, TILE), (rgb, gray, h, w))
    check_guard(gray_full, h * w, "gray", fill=-1.0)
    return [(gray, rgb_host.astype(np.float64) @ GRAY_WEIGHTS)]


# ------------------------------------------------------------------------------ grid-stride loop

@grader("scale_shift", kernels=["scale_shift"],
        cases=[dict(n=1), dict(n=511), dict(n=513), dict(n=100_003), dict(n=2**22 + 1)],
        emulator_cases=[dict(n=1), dict(n=511), dict(n=513), dict(n=4099), dict(n=30001)],
        hint=["the grid has only 512 threads, fewer than most arrays' elements: each thread must update several "
              "elements, and every element exactly once",
              "start at the thread's global index and step by the number of threads in the whole grid "
              "(gridDim.x * blockDim.x), while the index is below n",
              "for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) "
              "x[i] = a * x[i] + b"])
def scale_shift(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """x = a * x + b in place, launched with 4 blocks of 128 threads whatever n is."""
    n = case["n"]
    rng = np.random.default_rng()
    # a, b away from (1, 0): an element updated twice, or never, is always wrong.
    a, b = np.float32(rng.uniform(1.5, 2.5)), np.float32(rng.uniform(0.5, 1.5))
    x_host = rng.standard_normal(n).astype(np.float32)
    x, x_full = guarded(x_host, 1.0)
    grid, block = GRID_STRIDE_LAUNCH
    load("scale_shift")(grid, block, (x, a, b, n))
    check_guard(x_full, n, "x", fill=1.0)
    ax = a * x_host.astype(np.float64)
    return [(x, ax + b, np.abs(ax) + b)]  # relative to the terms: a x + b cancels where x ~ -b / a


# ------------------------------------------------------------------------------ challenge: float4 FMA

FMA_THREADS = 256
FMA_MAX_BLOCKS = 1024  # a fixed cap: large arrays need a grid-stride loop


def fma_float4_launch(n: int) -> tuple[tuple[int], tuple[int]]:
    """The challenge's launch: one float4 per thread up to 1024 blocks of 256 threads, never more."""
    return (max(1, min(_cdiv(_cdiv(n, 4), FMA_THREADS), FMA_MAX_BLOCKS)),), (FMA_THREADS,)


@grader("fma_float4", kernels=["fma_float4"],
        cases=[dict(n=1), dict(n=3), dict(n=4), dict(n=1031), dict(n=2**21 + 1), dict(n=2**24 + 3)],
        emulator_cases=[dict(n=1), dict(n=3), dict(n=4), dict(n=1031), dict(n=40_001), dict(n=2**21 + 1)],
        speed=dict(case=dict(n=2**24 + 3), factor=1.5),  # H100: scalar loop 1.01x (both at ~2.7 TB/s)
        hint=["count the elements: the float4 loop covers the first n / 4 groups of four, and the last n % 4 "
              "elements (0 to 3 of them) need their own, scalar, step done by one thread each",
              "view the arrays as float4 (reinterpret_cast<const float4*>(x)); loop g from the global thread "
              "index to n / 4 in steps of gridDim.x * blockDim.x and update the four components of group g; "
              "then threads 0..n % 4 - 1 of the whole grid update elements 4 * (n / 4) + t with scalars",
              "for (int g = tid; g < n / 4; g += stride) { float4 a = x4[g], b = y4[g], c = z4[g]; "
              "c.x = fmaf(a.x, b.x, c.x); ... z4[g] = c; } then if (tid < n % 4) { int i = n / 4 * 4 + tid; "
              "z[i] = fmaf(x[i], y[i], z[i]); }"])
def fma_float4(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    """z = x * y + z in place, float4 loads and stores with a scalar tail, on a capped grid."""
    n = case["n"]
    rng = np.random.default_rng()
    x_host, y_host, z_host = (rng.standard_normal(n).astype(np.float32) + 2 for _ in range(3))  # never ~0
    x, _ = guarded(x_host)
    y, _ = guarded(y_host)
    z, z_full = guarded(z_host, 1.0)
    grid, block = fma_float4_launch(n)
    load("fma_float4")(grid, block, (x, y, z, n))
    check_guard(z_full, n, "z", fill=1.0)
    xy = x_host.astype(np.float64) * y_host
    # relative to |x y| + |z|: x y + z cancels where x or y < 0 (n = 1: one draw in ~5e4 failed a kernel that
    # writes x * y + z without fmaf on the emulator, its product rounded relative to |x y|, not to the result)
    return [(z, xy + z_host, np.abs(xy) + np.abs(z_host))]
