"""Kernels of chapter 2 against NumPy references: fresh random inputs, poisoned outputs, awkward sizes.

Runs on the current backend (the CPU emulator by default, a GPU under `make gpu-test`).
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl

DIR = "02-execution-model"


def blocks(n: int, threads: int) -> int:
    return (n + threads - 1) // threads


# ------------------------------------------------------------------------------ divergence.cu

def branch_reference(h: np.ndarray, width: int, iters: int) -> np.ndarray:
    a, b = h.copy(), h.copy()
    for _ in range(iters):
        a = a * np.uint32(1664525) + np.uint32(1013904223)
        b = (b ^ (b >> np.uint32(15))) * np.uint32(2654435761)
    return np.where((np.arange(h.size) // width) % 2 == 0, a, b)


@pytest.mark.parametrize("n,width,iters", [(1, 1, 1), (31, 2, 5), (1000, 7, 10), (4099, 32, 3), (5000, 100, 0)])
def test_branch_by_width(n, width, iters):
    k = cudl.load(f"{DIR}/divergence.cu", "branch_by_width")
    h = np.random.default_rng().integers(0, 2**32, n, dtype=np.uint32)
    out = cudl.poisoned(n, np.uint32)
    k((blocks(n, 128),), (128,), (cudl.xp.asarray(h), out, n, width, iters))
    cudl.check(out, branch_reference(h, width, iters))


def test_branch_by_width_rejects_zero_width():
    k = cudl.load(f"{DIR}/divergence.cu", "branch_by_width")
    n = 100
    out = cudl.xp.zeros(n, np.uint32)
    h = np.random.default_rng().integers(0, 2**32, n, dtype=np.uint32)
    k((1,), (128,), (cudl.xp.asarray(h), out, n, 0, 3))
    assert not cudl.to_numpy(out).any()  # width < 1: no thread writes


# ------------------------------------------------------------------------------ coalescing.cu

@pytest.mark.parametrize("n,stride", [(1, 1), (257, 1), (1000, 2), (3001, 7), (2049, 32)])
def test_copy_strided(n, stride):
    k = cudl.load(f"{DIR}/coalescing.cu", "copy_strided")
    src, out = cudl.randn(n * stride), cudl.poisoned(n)
    k((blocks(n, 256),), (256,), (src, out, n, stride))
    cudl.check(out, cudl.to_numpy(src)[::stride].astype(np.float64))


@pytest.mark.parametrize("n,offset", [(1, 0), (255, 1), (1000, 3), (3001, 31), (4097, 32)])
def test_copy_offset(n, offset):
    k = cudl.load(f"{DIR}/coalescing.cu", "copy_offset")
    src, out = cudl.randn(n + offset), cudl.poisoned(n)
    k((blocks(n, 256),), (256,), (src, out, n, offset))
    cudl.check(out, cudl.to_numpy(src)[offset:].astype(np.float64))


# ------------------------------------------------------------------------------ copy_inflight.cu

@pytest.mark.parametrize("name", ["copy_grid_stride", "copy_grid_stride_ilp4"])
@pytest.mark.parametrize("n,grid,threads", [(1, 1, 32), (7, 2, 32), (1000, 3, 128), (5003, 4, 128),
                                            (20001, 5, 96)])
def test_grid_stride_copies(name, n, grid, threads):
    k = cudl.load(f"{DIR}/copy_inflight.cu", name)
    src, out = cudl.randn(n), cudl.poisoned(n)
    k((grid,), (threads,), (src, out, n))
    cudl.check(out, cudl.to_numpy(src).astype(np.float64))


# ------------------------------------------------------------------------------ pointer_chase.cu

def random_cycle(m: int) -> np.ndarray:
    order = np.random.default_rng().permutation(m).astype(np.int32)
    nxt = np.empty(m, np.int32)
    nxt[order] = np.roll(order, -1)
    return nxt


@pytest.mark.parametrize("m,steps", [(1, 1), (2, 3), (1000, 999), (4097, 5000), (333, 0)])
def test_pointer_chase(m, steps):
    k = cudl.load(f"{DIR}/pointer_chase.cu", "pointer_chase")
    nxt = random_cycle(m)
    out = cudl.poisoned(1, np.int32)
    k((2,), (64,), (cudl.xp.asarray(nxt), out, m, steps))  # only thread 0 of block 0 works
    j = 0
    for _ in range(steps):
        j = int(nxt[j])
    cudl.check(out, np.array([j], np.int32))


def test_pointer_chase_visits_every_element():
    m = 500
    nxt = random_cycle(m)
    seen, j = set(), 0
    for _ in range(m):
        seen.add(j)
        j = int(nxt[j])
    assert len(seen) == m and j == 0  # one cycle through all of them: no shortcut through the caches


# ------------------------------------------------------------------------------ roofline.cu

@pytest.mark.parametrize("n,iters", [(1, 0), (1, 1), (255, 8), (1000, 17), (3001, 100)])
def test_fma_intensity(n, iters):
    k = cudl.load(f"{DIR}/roofline.cu", "fma_intensity")
    a, b = 0.9, 0.1
    src, out = cudl.randn(n), cudl.poisoned(n)
    k((blocks(n, 256),), (256,), (src, out, n, iters, a, b))
    ref = cudl.to_numpy(src).astype(np.float64)
    for _ in range(iters):
        ref = ref * np.float32(a) + np.float32(b)  # the kernel's constants are float32
    cudl.check(out, ref)


# ------------------------------------------------------------------------------ smem_banks.cu

WORDS = 32 * 34  # LANES x MAX_STRIDE in smem_banks.cu


def smem_reference(words: np.ndarray, n: int, stride: int, rounds: int) -> np.ndarray:
    lane = np.arange(n) % 32
    idx = (lane * stride)[:, None] + np.arange(32)[None, :]
    return (words[idx].astype(np.uint64).sum(axis=1) * rounds % 2**32).astype(np.uint32)


@pytest.mark.parametrize("n,threads,stride,rounds", [(1, 32, 1, 1), (100, 64, 2, 3), (256, 128, 32, 2),
                                                     (513, 256, 33, 2), (700, 96, 34, 1), (64, 32, 0, 4)])
def test_smem_read_stride(n, threads, stride, rounds):
    k = cudl.load(f"{DIR}/smem_banks.cu", "smem_read_stride")
    words = np.random.default_rng().integers(0, 2**32, WORDS, dtype=np.uint32)
    out = cudl.poisoned(n, np.uint32)
    k((blocks(n, threads),), (threads,), (cudl.xp.asarray(words), out, n, stride, rounds))
    cudl.check(out, smem_reference(words, n, stride, rounds))


def test_smem_read_stride_out_of_range_stride_writes_nothing():
    k = cudl.load(f"{DIR}/smem_banks.cu", "smem_read_stride")
    n = 64
    out = cudl.xp.full(n, 7, np.uint32)
    words = np.random.default_rng().integers(0, 2**32, WORDS, dtype=np.uint32)
    k((1,), (64,), (cudl.xp.asarray(words), out, n, 35, 1))
    assert (cudl.to_numpy(out) == 7).all()
