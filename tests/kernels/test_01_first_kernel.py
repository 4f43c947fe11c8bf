"""Every kernel of kernels_src/01-first-kernel/ against a float64 NumPy reference.

Fresh random inputs, NaN-poisoned outputs, odd sizes (1, not a multiple of the block or of 4, more than one
grid-stride pass). Runs on the current backend: the CPU emulator by default, a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl

THREADS = 256
SIZES = [1, 3, 4, 5, 255, 257, 1000, 4099, 20001]


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _inputs(n: int):
    x, y = cudl.randn(n), cudl.randn(n)
    ref = cudl.to_numpy(x).astype(np.float64) + cudl.to_numpy(y)
    return x, y, cudl.poisoned(n), ref


def _guarded_out(n: int, guard: int = 1024):
    """A NaN-poisoned output of n floats followed by a guard of 7.0s: (whole buffer, view of the n floats)."""
    full = cudl.poisoned(n + guard)
    full[n:] = 7.0
    return full, full[:n]


def _guard_intact(full, n: int) -> None:
    tail = cudl.to_numpy(full[n:])
    assert np.all(tail == 7.0), f"the kernel wrote past the end of out[{n}]"


@pytest.mark.parametrize("n", [1, 5, 10, 256, 1000])
@pytest.mark.parametrize("threads", [4, 32, 256])
def test_thread_ids(n, threads):
    k = cudl.load("01-first-kernel/thread_ids.cu", "thread_ids")
    block, thread, index = (cudl.poisoned(n, np.int32) for _ in range(3))
    k((_cdiv(n, threads),), (threads,), (block, thread, index, n))
    i = np.arange(n)
    cudl.check(block, i // threads, name="blockIdx.x")
    cudl.check(thread, i % threads, name="threadIdx.x")
    cudl.check(index, i, name="i")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("threads", [32, 256])
def test_vector_add(n, threads):
    k = cudl.load("01-first-kernel/vector_add.cu", "vector_add")
    x, y, _, ref = _inputs(n)
    full, out = _guarded_out(n)
    k((_cdiv(n, threads),), (threads,), (x, y, out, n))
    cudl.check(out, ref, name=f"vector_add n={n}")
    _guard_intact(full, n)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("blocks", [1, 3, 8])
def test_vector_add_grid_stride(n, blocks):
    """Fewer threads than elements (several passes), and more threads than elements."""
    k = cudl.load("01-first-kernel/vector_add_grid_stride.cu", "vector_add_grid_stride")
    x, y, _, ref = _inputs(n)
    full, out = _guarded_out(n)
    k((blocks,), (THREADS,), (x, y, out, n))
    cudl.check(out, ref, name=f"vector_add_grid_stride n={n} blocks={blocks}")
    _guard_intact(full, n)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("blocks", [1, 2, 8])
def test_vector_add_float4(n, blocks):
    """The float4 body plus the scalar tail of n % 4 elements, with one or several grid-stride passes."""
    k = cudl.load("01-first-kernel/vector_add_float4.cu", "vector_add_float4")
    x, y, _, ref = _inputs(n)
    full, out = _guarded_out(n)
    k((blocks,), (THREADS,), (x, y, out, n))
    cudl.check(out, ref, name=f"vector_add_float4 n={n} blocks={blocks}")
    _guard_intact(full, n)


def test_vector_add_float4_one_group_per_thread():
    """The launch the chapter benchmarks for large n: as many threads as groups of four (one pass)."""
    k = cudl.load("01-first-kernel/vector_add_float4.cu", "vector_add_float4")
    n = cudl.size(gpu=2**24 + 3, emulator=16387)
    x, y, out, ref = _inputs(n)
    k((_cdiv(n // 4, THREADS),), (THREADS,), (x, y, out, n))
    cudl.check(out, ref, name="vector_add_float4, one group per thread")


def test_vector_add_large_gpu_size():
    """All three versions agree with NumPy at a size with several waves (large on a GPU)."""
    n = cudl.size(gpu=2**26 + 7, emulator=40003)
    x, y, _, ref = _inputs(n)
    for path, name, grid in (("vector_add.cu", "vector_add", _cdiv(n, THREADS)),
                             ("vector_add_grid_stride.cu", "vector_add_grid_stride", 16),
                             ("vector_add_float4.cu", "vector_add_float4", 16)):
        out = cudl.poisoned(n)
        cudl.load(f"01-first-kernel/{path}", name)((grid,), (THREADS,), (x, y, out, n))
        cudl.check(out, ref, name=name)
