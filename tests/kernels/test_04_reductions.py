"""Chapter 4 kernels against float64 NumPy references: fresh random inputs, poisoned outputs, odd sizes.

Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl

U = 2.0**-24  # float32 unit roundoff
SIZES = [1, 3, 31, 255, 257, 1000, 4099, 70_001]
ROW_SHAPES = [(1, 1), (3, 33), (8, 32), (17, 1001), (9, 4096), (5, 4098)]


def load(file: str, name: str) -> cudl.Kernel:
    return cudl.load("04-reductions/" + file, name)


def grid_for(threads: int) -> int:
    info = cudl.device_info()
    return info.get("sms", 1) * (info.get("max_threads_per_sm", 2048) // threads)


def assert_sum(out, x, depth: int) -> None:
    """A float32 sum of nesting depth `depth` errs by at most ~depth * u * sum|x| (Higham)."""
    xh = cudl.to_numpy(x).astype(np.float64)
    ref = xh.sum()
    rtol = max(1e-5, depth * U * np.abs(xh).sum() / max(abs(ref), 1e-30))
    c = cudl.compare(cudl.to_numpy(out).ravel()[:1], np.array([ref]), rtol=rtol)
    assert c.ok, str(c)


def multipass(kernel, x, n: int, threads: int, shared: bool):
    src, m = x, n
    while True:
        blocks = (m + threads - 1) // threads
        out = cudl.poisoned(blocks)
        kernel((blocks,), (threads,), (src, out, m), shared_mem=threads * 4 if shared else 0)
        if blocks == 1:
            return out
        src, m = out, blocks


@pytest.mark.parametrize("n", SIZES)
def test_sum_atomic(n):
    k = load("sum_1_atomic.cu", "sum_atomic")
    x = cudl.randn(n)
    for slots in (1, 7):
        out = cudl.xp.zeros(slots, np.float32)
        k(((n + 255) // 256,), (256,), (x, out, n, slots))
        assert_sum(np.array([cudl.to_numpy(out).astype(np.float64).sum()]), x, n + slots)


@pytest.mark.parametrize("file,name,shared", [("sum_2_interleaved.cu", "sum_interleaved", True),
                                              ("sum_3_sequential.cu", "sum_sequential", True),
                                              ("sum_4_shuffle.cu", "sum_shuffle", False)])
@pytest.mark.parametrize("threads", [32, 256, 1024])
def test_sum_multipass(file, name, shared, threads):
    k = load(file, name)
    for n in SIZES:
        x = cudl.randn(n)
        assert_sum(multipass(k, x, n, threads, shared), x, 2 * n.bit_length())


def test_sum_partials_are_per_block():
    """Each block's partial is the sum of its own 256 elements (not only the final total)."""
    k = load("sum_4_shuffle.cu", "sum_shuffle")
    n = 1000
    x = cudl.randn(n)
    out = cudl.poisoned(4)
    k((4,), (256,), (x, out, n))
    padded = np.zeros(1024)
    padded[:n] = cudl.to_numpy(x)
    cudl.check(out, padded.reshape(4, 256).sum(1))


@pytest.mark.parametrize("name", ["sum_grid_stride", "sum_grid_stride_float4"])
def test_sum_grid_stride(name):
    k = load("sum_5_grid_stride.cu", name)
    for threads in (128, 1024):
        grid = grid_for(threads)
        partials = cudl.poisoned(grid)
        for n in SIZES:
            x = cudl.randn(n + 1)[1:] if n == 1000 else cudl.randn(n)  # n=1000: a misaligned view (no float4)
            out = cudl.poisoned(1)
            k((grid,), (threads,), (x, partials, n))
            k((1,), (threads,), (partials, out, grid))
            assert_sum(out, x, n // (grid * threads) + 32)


def test_onepass_sum_max_deterministic():
    ks, km = load("reduce_6_onepass.cu", "sum_onepass"), load("reduce_6_onepass.cu", "max_onepass")
    for threads in (64, 1024):
        grid = grid_for(threads)
        partials, counter = cudl.poisoned(grid), cudl.xp.zeros(1, np.uint32)
        for n in SIZES:
            x = cudl.randn(n)
            out = cudl.poisoned(1)
            ks((grid,), (threads,), (x, partials, counter, out, n))
            assert_sum(out, x, n // (grid * threads) + 32)
            first = cudl.to_numpy(out).copy()
            ks((grid,), (threads,), (x, partials, counter, out, n))  # the counter was reset by the last block
            assert np.array_equal(cudl.to_numpy(out), first), "two runs gave different bits"
            xneg = x - 10  # all negative: the identity of max must be -inf, not 0
            km((grid,), (threads,), (xneg, partials, counter, out, n))
            cudl.check(out, np.array([cudl.to_numpy(xneg).max()]))
        assert int(cudl.to_numpy(counter)[0]) == 0


def test_onepass_max_propagates_nan():
    km = load("reduce_6_onepass.cu", "max_onepass")
    grid = grid_for(256)
    partials, counter, out = cudl.poisoned(grid), cudl.xp.zeros(1, np.uint32), cudl.xp.zeros(1, np.float32)
    x = cudl.randn(5000)
    x[1234] = np.nan
    km((grid,), (256,), (x, partials, counter, out, 5000))
    assert np.isnan(cudl.to_numpy(out)[0])


def _with_ties(shape, rng) -> np.ndarray:
    x = np.round(rng.standard_normal(shape) * 2) / 2  # few distinct values: ties everywhere
    flat = x.reshape(-1, x.shape[-1])
    for row in flat:
        j = rng.integers(0, row.size, size=2)
        row[j] = row.max() + 1  # two maxima (sometimes at the same index)
    return x.astype(np.float32)


def test_argmax_onepass():
    k = load("argmax.cu", "argmax_onepass")
    rng = np.random.default_rng()
    for threads in (64, 512):
        grid = grid_for(threads)
        pv, pi, counter = cudl.poisoned(grid), cudl.poisoned(grid, np.int64), cudl.xp.zeros(1, np.uint32)
        for n in SIZES:
            xh = _with_ties(n, rng)
            out = cudl.poisoned(1, np.int64)
            k((grid,), (threads,), (cudl.xp.asarray(xh), pv, pi, counter, out, n))
            cudl.check(out, np.array([np.argmax(xh)]))
    xh = rng.standard_normal(3000).astype(np.float32)
    xh[[2000, 700]] = np.nan  # NaN wins, and the first NaN is the answer (as numpy.argmax)
    out = cudl.poisoned(1, np.int64)
    k((grid,), (threads,), (cudl.xp.asarray(xh), pv, pi, counter, out, 3000))
    assert int(cudl.to_numpy(out)[0]) == 700


@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_rows(shape):
    rows, cols = shape
    rng = np.random.default_rng()
    xh = (rng.standard_normal(shape) + rng.uniform(-10, 10, size=(rows, 1))).astype(np.float32)
    x = cudl.xp.asarray(xh)
    ref = xh.astype(np.float64)
    for threads in (64, 256):
        warps = threads // 32
        wgrid = ((rows + warps - 1) // warps,)
        for name, expect in (("row_sum_warp", ref.sum(1)), ("row_max_warp", ref.max(1))):
            out = cudl.poisoned(rows)
            load("rows.cu", name)(wgrid, (threads,), (x, out, rows, cols))
            cudl.check(out, expect, name=name)
        out = cudl.poisoned(rows)
        load("rows.cu", "row_sum_block")((rows,), (threads,), (x, out, rows, cols))
        cudl.check(out, ref.sum(1), name="row_sum_block")
        xt = _with_ties(shape, rng)
        outi = cudl.poisoned(rows, np.int64)
        load("rows.cu", "row_argmax_warp")(wgrid, (threads,), (cudl.xp.asarray(xt), outi, rows, cols))
        cudl.check(outi, np.argmax(xt, axis=1), name="row_argmax_warp")


@pytest.mark.parametrize("n", [1, 31, 32, 1000, 1025, 70_001])
@pytest.mark.parametrize("threads", [64, 1024])
def test_scan(n, threads):
    kb, ka = load("scan.cu", "scan_block_inclusive"), load("scan.cu", "scan_add_offsets")

    def scan(x, y, m):
        tiles = (m + threads - 1) // threads
        sums = cudl.poisoned(tiles)
        kb((tiles,), (threads,), (x, y, sums, m))
        if tiles > 1:
            scanned = cudl.poisoned(tiles)
            scan(sums, scanned, tiles)
            ka((tiles,), (threads,), (y, scanned, m))

    x, y = cudl.randn(n), cudl.poisoned(n)
    scan(x, y, n)
    cudl.check(y, np.cumsum(cudl.to_numpy(x).astype(np.float64)))
