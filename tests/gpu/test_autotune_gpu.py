"""cudl.autotune on a real GPU (`make gpu-test`): a vector scale with 1, 2 or 4 elements per thread is tuned; the
candidates that fail to compile, exceed a resource limit or compute a wrong result are reported and skipped; the
choice is correct, and read back from the cache on the second call without timing.

    CUDL_BACKEND=gpu python -m pytest -q -s tests/gpu/test_autotune_gpu.py
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import cudl

cupy = pytest.importorskip("cupy")
BENCH = importlib.import_module("cudl.bench")

SCALE_SRC = r"""
#ifndef WRONG
#define WRONG 0
#endif
// y = a * x, EPT consecutive elements per thread; WRONG=1 adds 1 (a candidate whose check must fail)
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    const long long base = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * EPT;
    for (int j = 0; j < EPT; j++)
        if (base + j < n) y[base + j] = a * x[base + j] + WRONG;
}
"""
GOOD = [dict(EPT=1, BLOCK=256), dict(EPT=2, BLOCK=256), dict(EPT=4, BLOCK=256), dict(EPT=4, BLOCK=128)]
BAD = {
    "build": dict(EPT="four", BLOCK=256),  # -DEPT=four: does not compile
    "launch": dict(EPT=1, BLOCK=256, SMEM=400 * 1024),  # more shared memory than any GPU's block may have
    "check": dict(EPT=2, BLOCK=256, WRONG=1),  # the fastest-looking, but wrong
}
N = 1 << 26  # 256 MiB per array: far larger than L2


def test_autotune_on_the_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDL_CACHE", str(tmp_path))
    n = N
    x, y = cudl.randn(n), cudl.poisoned(n)
    ref = 3.0 * cudl.to_numpy(x).astype(np.float64)

    def build(c):
        return c, cudl.load(SCALE_SRC, "scale", options=[f"-D{k}={v}" for k, v in c.items() if k != "SMEM"])

    def run(k):
        c, kern = k
        kern((-(-n // (c["BLOCK"] * c["EPT"])),), (c["BLOCK"],), (x, y, np.float32(3.0), n),
             shared_mem=c.get("SMEM", 0))

    checked = []

    def check(k):
        checked.append(k[0])
        y.fill(np.nan)  # the check launches on its own output, so a stale correct result cannot pass
        run(k)
        cudl.check(y, ref)

    space = [*GOOD, *BAD.values()]
    kwargs = dict(check=check, default=GOOD[0], shape=n, source=SCALE_SRC, bytes=8 * n)
    tuned = cudl.autotune("scale test", space, build, run, **kwargs)
    print(tuned)
    print(tuned._repr_markdown_())
    notes = {i: r["note"] for i, r in enumerate(tuned.table)}
    for j, stage in enumerate(BAD):
        assert notes[len(GOOD) + j].startswith(f"failed: {stage}:"), notes
        assert tuned.table[len(GOOD) + j]["ms"] is None
    assert tuned.config in GOOD and all(r["ms"] > 0 for r in tuned.table[: len(GOOD)])
    assert (tuned.gain == 1.0) if tuned.config == GOOD[0] else (tuned.gain > 1.0)
    y.fill(np.nan)
    run(tuned.kernel)
    cudl.check(y, ref)

    # the second call reads the choice back: built and checked, never timed
    def never(*args, **kw):
        raise AssertionError("a cached choice was timed again")

    monkeypatch.setattr(BENCH, "bench", never)
    checked.clear()
    again = cudl.autotune("scale test", space, build, run, **kwargs)
    assert again.cached and again.config == tuned.config and again.gain == tuned.gain
    assert checked == [tuned.config]
