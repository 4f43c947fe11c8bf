"""Chapter 7 kernels against float64 NumPy references: fresh random inputs, poisoned outputs, odd row
lengths, large-magnitude inputs for softmax (exp overflows unless the maximum is subtracted), NaN-free.

Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.check import bf16_to_float, float_to_bf16

FUSED = "07-fusion/fused_rows.cu"
SHAPES = [(1, 1), (3, 33), (5, 100), (4, 1000), (2, 4096), (3, 4099)]
DTYPES = ["float32", "float16", "bfloat16"]
CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "bfloat16"}
RTOL = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


def threads_for(cols: int, per_thread: int = 8) -> int:
    """A multiple of 32 giving each thread about `per_thread` values, and never more than 16 (PER_THREAD)."""
    want = max(-(-cols // per_thread), -(-cols // 16))
    return max(32, min(1024, -(-want // 32) * 32))


def store(a: np.ndarray, dtype: str):
    """Host float array -> device array of `dtype` (bf16 as uint16 bits); and its values as float64."""
    a = np.asarray(a, np.float32)
    dev = float_to_bf16(a) if dtype == "bfloat16" else a.astype(dtype)
    back = bf16_to_float(dev) if dtype == "bfloat16" else dev.astype(np.float32)
    return cudl.xp.asarray(dev), back.astype(np.float64)


def poisoned(shape, dtype: str):
    return cudl.xp.full(shape, 0x7FC1, np.uint16) if dtype == "bfloat16" else cudl.poisoned(shape, dtype)


def check(out, ref, dtype: str, name: str, rtol: float | None = None) -> None:
    got = cudl.to_numpy(out)
    got = bf16_to_float(got) if dtype == "bfloat16" else got
    assert not np.isnan(got).any(), f"{name}: NaN in the output"
    c = cudl.compare(got.astype(np.float64), ref, rtol=rtol or RTOL[dtype])
    assert c.ok, f"{name}: {c}"


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def big_inputs(rows: int, cols: int, scale: float = 40.0) -> np.ndarray:
    """Logits up to a few hundred: exp(x) overflows float32 without the max subtraction."""
    rng = np.random.default_rng()
    return (rng.standard_normal((rows, cols)) * scale + rng.uniform(-200, 200, size=(rows, 1))).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("file,name", [("softmax_1_three_pass.cu", "softmax_three_pass"),
                                       ("softmax_2_online.cu", "softmax_online")])
def test_softmax_warp_per_row(file, name, shape):
    rows, cols = shape
    xh = big_inputs(rows, cols)
    x, y = cudl.xp.asarray(xh), cudl.poisoned(shape)
    for threads in (32, 128):
        cudl.load("07-fusion/" + file, name)((-(-rows // (threads // 32)),), (threads,), (x, y, rows, cols))
        check(y, softmax_ref(xh.astype(np.float64)), "float32", name)


@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_welford(shape):
    rows, cols = shape
    rng = np.random.default_rng()
    xh = (rng.standard_normal(shape) * 3 + 1000).astype(np.float32)  # a large mean: E[x^2] - E[x]^2 cancels
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    x, y = cudl.xp.asarray(xh), cudl.poisoned(shape)
    mean, rstd = cudl.poisoned(rows), cudl.poisoned(rows)
    xd = xh.astype(np.float64)
    mu, var = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
    for threads in (32, 256):
        cudl.load("07-fusion/layernorm_1_welford.cu", "layernorm_welford")(
            (rows,), (threads,), (x, cudl.xp.asarray(w), cudl.xp.asarray(b), y, mean, rstd, rows, cols, 1e-5))
        # x - mean loses the digits the mean and x share: fp32 error ~ u * |mean| / std (here ~333 u), while
        # E[x^2] - E[x]^2 would lose ~u * mean^2 / var, a 1e-2 error: the test tells the two apart.
        rtol = 1e-5 + 4 * 2.0**-24 * 1000 / 3
        check(y, (xd - mu) / np.sqrt(var + 1e-5) * w + b, "float32", "layernorm_welford", rtol)
        check(mean, mu[:, 0], "float32", "mean")
        check(rstd, 1 / np.sqrt(var[:, 0] + 1e-5), "float32", "rstd")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_registers(dtype, shape):
    rows, cols = shape
    x, xd = store(big_inputs(rows, cols), dtype)
    y = poisoned(shape, dtype)
    for per_thread in (4, 16):
        cudl.load(FUSED, f"softmax<{CTYPE[dtype]}>")((rows,), (threads_for(cols, per_thread),), (x, y, rows, cols))
        check(y, softmax_ref(xd), dtype, f"softmax<{dtype}>")


def test_softmax_registers_instances():
    """The three instances the chapter uses, named literally (the compile tests collect them)."""
    for name in ("softmax<float>", "softmax<__half>", "softmax<bfloat16>"):
        assert cudl.load(FUSED, name).name == name


def norm_inputs(rows: int, cols: int, dtype: str):
    rng = np.random.default_rng()
    x = store(rng.standard_normal((rows, cols)) * 2 + rng.uniform(-5, 5, size=(rows, 1)), dtype)
    w = store(rng.standard_normal(cols), dtype)
    b = store(rng.standard_normal(cols), dtype)
    return x, w, b


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_forward(dtype, shape):
    rows, cols = shape
    (x, xd), (w, wd), (b, bd) = norm_inputs(rows, cols, dtype)
    y, mean, rstd = poisoned(shape, dtype), cudl.poisoned(rows), cudl.poisoned(rows)
    mu, var = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
    cudl.load(FUSED, f"layernorm_forward<{CTYPE[dtype]}>")(
        (rows,), (threads_for(cols),), (x, w, b, y, mean, rstd, rows, cols, 1e-5))
    check(y, (xd - mu) / np.sqrt(var + 1e-5) * wd + bd, dtype, "layernorm_forward")
    check(mean, mu[:, 0], "float32", "mean")  # statistics are fp32 whatever the storage type
    check(rstd, 1 / np.sqrt(var[:, 0] + 1e-5), "float32", "rstd")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_forward(dtype, shape):
    rows, cols = shape
    (x, xd), (w, wd), _ = norm_inputs(rows, cols, dtype)
    y, rstd = poisoned(shape, dtype), cudl.poisoned(rows)
    r = 1 / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-6)
    cudl.load(FUSED, f"rmsnorm_forward<{CTYPE[dtype]}>")(
        (rows,), (threads_for(cols),), (x, w, y, rstd, rows, cols, 1e-6))
    check(y, xd * r * wd, dtype, "rmsnorm_forward")
    check(rstd, r[:, 0], "float32", "rstd")


def layernorm_backward_ref(dy, x, w, eps=1e-5):
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    r = 1 / np.sqrt(var + eps)
    xhat = (x - mu) * r
    g = dy * w
    dx = r * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))
    return dx, (dy * xhat).sum(0), dy.sum(0), mu[:, 0], r[:, 0]


@pytest.mark.parametrize("shape", [(1, 1), (3, 33), (37, 100), (5, 1000), (9, 4099)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_backward(dtype, shape):
    rows, cols = shape
    (x, xd), (w, wd), _ = norm_inputs(rows, cols, dtype)
    dy, dyd = store(np.random.default_rng().standard_normal(shape), dtype)
    dx_ref, dw_ref, db_ref, mu, r = layernorm_backward_ref(dyd, xd, wd)
    mean, rstd = cudl.xp.asarray(mu.astype(np.float32)), cudl.xp.asarray(r.astype(np.float32))
    for parts in (1, 4):
        dx, dw, db = poisoned(shape, dtype), poisoned(cols, dtype), poisoned(cols, dtype)
        dw_part, db_part = cudl.poisoned((parts, cols)), cudl.poisoned((parts, cols))
        cudl.load(FUSED, f"layernorm_backward<{CTYPE[dtype]}>")(
            (parts,), (threads_for(cols, 16),), (dy, x, w, mean, rstd, dx, dw_part, db_part, rows, cols))
        cudl.load(FUSED, f"layernorm_backward_reduce<{CTYPE[dtype]}>")(
            (-(-cols // 32),), (32, 8), (dw_part, db_part, dw, db, parts, cols))
        check(dx, dx_ref, dtype, "dx")
        check(dw, dw_ref, dtype, "dw")
        check(db, db_ref, dtype, "db")


# ------------------------------------------------------------------ version 4: fused_rows_pipelined.cu
PIPE = "07-fusion/fused_rows_pipelined.cu"


def threads_n(cols: int, n: int) -> int:
    """Threads for N values each: a multiple of 32 with N * threads >= cols."""
    return max(32, -(-cols // (32 * n)) * 32)


# grid = rows: one row per block (no row is loaded ahead); 2 and 3 blocks: each block walks several rows with
# D of them in flight, and rows % blocks != 0 for most shapes, so blocks end after different numbers of rows
PIPE_GRIDS = (None, 2, 3)
# (4, 1024): a full row for every N (cols == N * threads, vectorized): the kernels' copy without column checks
PIPE_SHAPES = [(1, 1), (3, 33), (5, 1000), (4, 1024), (5, 4099)]
PIPE_CONFIGS = [(8, 1), (8, 2), (16, 1), (16, 2)]  # (N values per thread, D rows in flight per block)


@pytest.mark.parametrize("shape", PIPE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_pipelined(dtype, shape):
    rows, cols = shape
    x, xd = store(big_inputs(rows, cols), dtype)
    for n, d in PIPE_CONFIGS:
        for grid in PIPE_GRIDS:
            y = poisoned(shape, dtype)
            cudl.load(PIPE, f"softmax_pipelined<{CTYPE[dtype]}, {n}, {d}>")(
                (grid or rows,), (threads_n(cols, n),), (x, y, rows, cols))
            check(y, softmax_ref(xd), dtype, f"softmax_pipelined<{dtype}, {n}, {d}>, grid {grid or rows}")


@pytest.mark.parametrize("shape", PIPE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_pipelined(dtype, shape):
    rows, cols = shape
    (x, xd), (w, wd), (b, bd) = norm_inputs(rows, cols, dtype)
    mu, var = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
    for n, d in PIPE_CONFIGS:
        for grid in PIPE_GRIDS:
            y, mean, rstd = poisoned(shape, dtype), cudl.poisoned(rows), cudl.poisoned(rows)
            cudl.load(PIPE, f"layernorm_pipelined<{CTYPE[dtype]}, {n}, {d}>")(
                (grid or rows,), (threads_n(cols, n),), (x, w, b, y, mean, rstd, rows, cols, 1e-5),
                shared_mem=2 * cols * x.itemsize)
            name = f"layernorm_pipelined<{dtype}, {n}, {d}>, grid {grid or rows}"
            check(y, (xd - mu) / np.sqrt(var + 1e-5) * wd + bd, dtype, name)
            check(mean, mu[:, 0], "float32", name + ": mean")
            check(rstd, 1 / np.sqrt(var[:, 0] + 1e-5), "float32", name + ": rstd")


@pytest.mark.parametrize("shape", PIPE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_pipelined(dtype, shape):
    rows, cols = shape
    (x, xd), (w, wd), _ = norm_inputs(rows, cols, dtype)
    r = 1 / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-6)
    for n, d in PIPE_CONFIGS:
        for grid in PIPE_GRIDS:
            y, rstd = poisoned(shape, dtype), cudl.poisoned(rows)
            cudl.load(PIPE, f"rmsnorm_pipelined<{CTYPE[dtype]}, {n}, {d}>")(
                (grid or rows,), (threads_n(cols, n),), (x, w, y, rstd, rows, cols, 1e-6),
                shared_mem=cols * x.itemsize)
            name = f"rmsnorm_pipelined<{dtype}, {n}, {d}>, grid {grid or rows}"
            check(y, xd * r * wd, dtype, name)
            check(rstd, r[:, 0], "float32", name + ": rstd")


def test_pipelined_instances():
    """Instances named literally, so that tests/test_kernels_compile.py compiles them with NVRTC for every GPU
    generation (the chapter and the tests above build their names with f-strings)."""
    kernels = [
        cudl.load("07-fusion/fused_rows_pipelined.cu", "softmax_pipelined<float, 8, 1>"),
        cudl.load("07-fusion/fused_rows_pipelined.cu", "softmax_pipelined<__half, 16, 2>"),
        cudl.load("07-fusion/fused_rows_pipelined.cu", "layernorm_pipelined<float, 16, 1>"),
        cudl.load("07-fusion/fused_rows_pipelined.cu", "layernorm_pipelined<bfloat16, 8, 2>"),
        cudl.load("07-fusion/fused_rows_pipelined.cu", "rmsnorm_pipelined<__half, 8, 1>"),
        cudl.load("07-fusion/fused_rows_pipelined.cu", "rmsnorm_pipelined<float, 16, 2>"),
    ]
    assert [k.name.split("<")[0] for k in kernels] == ["softmax_pipelined"] * 2 + ["layernorm_pipelined"] * 2 + [
        "rmsnorm_pipelined"] * 2
