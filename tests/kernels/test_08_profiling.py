"""Chapter 8 kernels (kernels_src/08-profiling/) against float64 NumPy references.

bias_gelu_backward in fp32 and bf16 (raw uint16 bits): dx elementwise and dbias summed over the rows by
atomics, fresh random inputs, NaN-poisoned dx, shapes that leave partial blocks and partial row strips.
Runs on the CPU emulator by default and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import cudl
from cudl.check import RTOL, bf16_to_float, compare, float_to_bf16

THREADS = 256
LOADERS = {  # written out literally: the compile tests instantiate the templates named in load(...) calls
    "float32": lambda: cudl.load("08-profiling/bias_gelu_backward.cu", "bias_gelu_backward<float>"),
    "bfloat16": lambda: cudl.load("08-profiling/bias_gelu_backward.cu", "bias_gelu_backward<bf16>"),
}
SHAPES = [(1, 1), (1, 257), (33, 1), (70, 300), (5, 512)]
ERF = np.vectorize(math.erf)


def gelu_grad64(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + ERF(v / math.sqrt(2))) + v * np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)


def stored(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype` (bf16 as bits) and the float64 values the kernel actually sees."""
    if dtype == "bfloat16":
        bits = float_to_bf16(a)
        return bits, bf16_to_float(bits).astype(np.float64)
    return a, a.astype(np.float64)


@pytest.mark.parametrize("dtype", sorted(LOADERS))
@pytest.mark.parametrize("rows_per_block", [1, 7, 32])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_gelu_backward(dtype, rows_per_block, shape):
    rows, cols = shape
    rng = np.random.default_rng()
    (da, da64), (h, h64) = (stored(rng.uniform(-3, 3, (rows, cols)).astype(np.float32), dtype) for _ in range(2))
    b, b64 = stored(rng.uniform(-1, 1, cols).astype(np.float32), dtype)
    xp = cudl.xp
    dh = xp.full((rows, cols), 0x7FC1, np.uint16) if dtype == "bfloat16" else cudl.poisoned((rows, cols))
    db = xp.zeros(cols, np.float32)
    grid = ((cols + THREADS - 1) // THREADS, (rows + rows_per_block - 1) // rows_per_block)
    LOADERS[dtype]()(grid, (THREADS,), (xp.asarray(da), xp.asarray(h), xp.asarray(b), dh, db, rows, cols,
                                        rows_per_block))
    ref = da64 * gelu_grad64(h64 + b64)
    c = compare(dh, ref, rtol=RTOL[dtype] if dtype == "bfloat16" else 1e-4)
    assert c.ok, f"dh: {c}"
    c = compare(db, ref.sum(axis=0), rtol=1e-4)  # fp32 sums of unrounded values in every case
    assert c.ok, f"db: {c}"


def test_dbias_accumulates_into_its_input():
    """The kernel adds to dbias (the caller zeroes it): a nonzero start value stays in the sum."""
    rows, cols = 40, 300
    rng = np.random.default_rng()
    da, h = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    b = np.zeros(cols, np.float32)
    start = rng.standard_normal(cols).astype(np.float32)
    xp = cudl.xp
    db, dh = xp.array(start, copy=True), cudl.poisoned((rows, cols))  # the kernel writes db
    LOADERS["float32"]()(((cols + 255) // 256, 5), (THREADS,), (xp.asarray(da), xp.asarray(h), xp.asarray(b),
                                                               dh, db, rows, cols, 8))
    ref = (da.astype(np.float64) * gelu_grad64(h.astype(np.float64))).sum(axis=0) + start
    assert compare(db, ref, rtol=1e-4).ok


# ------------------------------------------------------------------ version 2: 16-byte packs, rows in flight
PACKED = "08-profiling/bias_gelu_backward_2_packed.cu"
PACKED_LOADERS = {  # literal names for the compile tests; ROWS_IN_FLIGHT as the chapter builds it
    "float32": lambda r: cudl.load("08-profiling/bias_gelu_backward_2_packed.cu", "bias_gelu_backward_packed<float>",
                                   options=[f"-DROWS_IN_FLIGHT={r}"]),
    "bfloat16": lambda r: cudl.load("08-profiling/bias_gelu_backward_2_packed.cu", "bias_gelu_backward_packed<bf16>",
                                    options=[f"-DROWS_IN_FLIGHT={r}"]),
}
# widths that fill 16-byte packs (256, 512), leave a partial pack (1, 300 in fp32 is whole, in bf16 not: 300 % 8),
# or more columns than one block of 256 threads covers (2100 > 256 * 8 in bf16)
PACKED_SHAPES = [(1, 1), (33, 3), (70, 300), (5, 512), (9, 2100)]


@pytest.mark.parametrize("dtype", sorted(PACKED_LOADERS))
@pytest.mark.parametrize("rows_in_flight", [1, 2, 4])
@pytest.mark.parametrize("shape", PACKED_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_gelu_backward_packed(dtype, rows_in_flight, shape):
    rows, cols = shape
    rng = np.random.default_rng()
    (da, da64), (h, h64) = (stored(rng.uniform(-3, 3, (rows, cols)).astype(np.float32), dtype) for _ in range(2))
    b, b64 = stored(rng.uniform(-1, 1, cols).astype(np.float32), dtype)
    xp = cudl.xp
    ref = da64 * gelu_grad64(h64 + b64)
    vals = 16 // (2 if dtype == "bfloat16" else 4)  # values per 16-byte pack
    for rows_per_block in (1, 7, 32):
        dh = xp.full((rows, cols), 0x7FC1, np.uint16) if dtype == "bfloat16" else cudl.poisoned((rows, cols))
        db = xp.zeros(cols, np.float32)
        grid = (-(-cols // (vals * THREADS)), -(-rows // rows_per_block))
        PACKED_LOADERS[dtype](rows_in_flight)(grid, (THREADS,), (xp.asarray(da), xp.asarray(h), xp.asarray(b), dh,
                                                                 db, rows, cols, rows_per_block))
        c = compare(dh, ref, rtol=RTOL[dtype] if dtype == "bfloat16" else 1e-4)
        assert c.ok, f"dh, {rows_per_block} rows per block: {c}"
        c = compare(db, ref.sum(axis=0), rtol=1e-4)
        assert c.ok, f"db, {rows_per_block} rows per block: {c}"


def test_bias_gelu_backward_packed_misaligned():
    """Pointers that are not 16-byte aligned (a view one value in) take the one-value-at-a-time path. GPU only:
    the emulator hands a kernel aligned copies of its arguments, so the view's offset does not reach it."""
    if not cudl.on_gpu():
        pytest.skip("the CPU emulator passes 16-byte aligned copies of the arguments")
    rows, cols = 6, 64  # a multiple of the pack: only the alignment makes the rows unvectorizable
    rng = np.random.default_rng()
    xp = cudl.xp
    buf = [xp.asarray(rng.uniform(-3, 3, rows * cols + 1).astype(np.float32)) for _ in range(2)]
    da, h = (a[1:].reshape(rows, cols) for a in buf)
    b = xp.asarray(rng.uniform(-1, 1, cols).astype(np.float32))
    out = cudl.poisoned(rows * cols + 1)
    dh, db = out[1:].reshape(rows, cols), xp.zeros(cols, np.float32)
    PACKED_LOADERS["float32"](4)((1, 2), (THREADS,), (da, h, b, dh, db, rows, cols, 4))
    ref = cudl.to_numpy(da).astype(np.float64) * gelu_grad64(cudl.to_numpy(h).astype(np.float64) + cudl.to_numpy(b))
    assert compare(dh, ref, rtol=1e-4).ok
    assert compare(db, ref.sum(axis=0), rtol=1e-4).ok
