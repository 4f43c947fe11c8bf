"""Graders of chapter 14 (multi-GPU): the ring all-reduce's reduction step over one slice (float4 body,
scalar head and tail, any offset), and the challenge: one reduce-scatter step of n virtual ranks held as
the rows of one buffer.

Elements outside the slice a kernel must touch hold NaN in the received data (a read outside the slice
puts NaN into the sum) and random values in the accumulator that must come back unchanged; a poisoned
guard zone follows every buffer (a write past the end is caught).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.guard import check_guard

BLOCK = 128  # threads per block of ring_reduce_step
RS_BLOCK = 256  # threads per block of ring_reduce_scatter_step
RS_BLOCKS_X = 64  # blocks per rank (gridDim.x) of ring_reduce_scatter_step: a grid-stride loop covers the rest
GUARD = 64


def _aligned_device(host: np.ndarray, guard: int = GUARD) -> tuple[Any, Any]:
    """(view, whole): `host` on the device starting at a 256-byte boundary, then `guard` NaNs."""
    n = host.size
    raw = cudl.xp.full(n + guard + 64, np.nan, dtype=np.float32)
    ptr = cudl.address(raw)
    skip = (-ptr % 256) // 4
    whole = raw[skip:skip + n + guard]
    whole[:n] = cudl.xp.asarray(host.ravel())
    return whole[:n].reshape(host.shape), whole


# ------------------------------------------------------------------------------ ring_reduce_step

# Offsets 1, 3 and 5 with a float4 body on both backends: a kernel without its scalar head issues float4
# accesses at acc + 1, 3, 5 floats, a misaligned-address fault on a GPU (and on the emulator that checks
# alignment). Offset 1 with len 2 is the head clamped to len.
STEP_CASES = [dict(offset=0, len=1, blocks=1), dict(offset=1, len=2, blocks=1), dict(offset=3, len=6, blocks=1),
              dict(offset=5, len=1001, blocks=2), dict(offset=4096, len=2**20 + 3, blocks=40),
              dict(offset=2**20 + 1, len=2**24 + 2, blocks=264)]
STEP_EMU_CASES = [dict(offset=0, len=1, blocks=1), dict(offset=1, len=2, blocks=1), dict(offset=3, len=6, blocks=1),
                  dict(offset=1, len=1001, blocks=2), dict(offset=64, len=4099, blocks=3),
                  dict(offset=5, len=20003, blocks=4)]


def ring_reduce_step_ref(acc: np.ndarray, recv: np.ndarray, offset: int, length: int) -> np.ndarray:
    """acc with acc[offset:offset+length] += recv[...] in float64; the rest unchanged."""
    ref = acc.astype(np.float64)
    ref[offset:offset + length] += recv[offset:offset + length]
    return ref


@grader("ring_reduce_step", kernels=["ring_reduce_step"], cases=STEP_CASES, emulator_cases=STEP_EMU_CASES,
        hint=["the slice starts at any element, so acc + offset is 16-byte aligned only when offset is a "
              "multiple of 4: add a few single floats first, then whole float4 groups, then the last few floats; "
              "the grid may be smaller than the slice",
              "head = elements before the first index >= offset that is a multiple of 4 (at most 3, and at most "
              "len); the float4 body starts there and has (len - head) / 4 groups; the tail is what is left; every "
              "part walks with a grid-stride loop (i += gridDim.x * blockDim.x)",
              "t = global thread index, stride = gridDim.x * blockDim.x; head = min((4 - offset % 4) % 4, len); "
              "for i = t; i < head: acc[offset + i] += recv[offset + i]; start = offset + head; n4 = (len - head) "
              "/ 4; float4 loop over reinterpret_cast<float4*>(acc + start); tail: start + 4 * n4 + t up to "
              "offset + len"])
def ring_reduce_step(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    off, n, blocks = case["offset"], case["len"], case["blocks"]
    total = off + n + 5  # a few elements after the slice that must stay as they are
    rng = np.random.default_rng()
    acc_host = rng.standard_normal(total).astype(np.float32)
    recv_host = np.full(total, np.nan, np.float32)  # outside the slice: NaN, which any stray add spreads
    recv_host[off:off + n] = rng.standard_normal(n).astype(np.float32)
    acc, acc_whole = _aligned_device(acc_host)
    recv = _aligned_device(recv_host)[0]
    load("ring_reduce_step")((blocks,), (BLOCK,), (acc, recv, off, n))
    cudl.sync()
    check_guard(acc_whole, total, "acc")
    return [(acc, ring_reduce_step_ref(acc_host, recv_host, off, n))]


# ------------------------------------------------------------------------------ ring_reduce_scatter_step

def chunk_range(c: int, count: int, ranks: int) -> tuple[int, int]:
    """Chunk c of `ranks` chunks of `count` elements: [c * count // ranks, (c + 1) * count // ranks)."""
    return c * count // ranks, (c + 1) * count // ranks


def reduce_scatter_step_ref(data: np.ndarray, step: int) -> np.ndarray:
    """One ring step on the rows (ranks) of data, float64: rank r adds rank r-1's chunk (r - 1 - step) mod n
    to its own; every read is of a chunk nobody writes in this step, so the order does not matter."""
    ranks, count = data.shape
    out = data.astype(np.float64)
    for r in range(ranks):
        a, b = chunk_range((r - 1 - step) % ranks, count, ranks)
        out[r, a:b] += data[(r - 1) % ranks, a:b]
    return out


RS_CASES = [dict(ranks=2, count=1, steps=1), dict(ranks=2, count=7, steps=1), dict(ranks=3, count=10, steps=2),
            dict(ranks=4, count=4099, steps=3), dict(ranks=8, count=2**20 + 5, steps=7),
            dict(ranks=8, count=2**24 + 5, steps=1)]
# The last emulator case has chunks of 17,500 floats, more than the 64 x 256 threads of a rank: a grid-stride
# loop is needed there too, not only on a GPU.
RS_EMU_CASES = [dict(ranks=2, count=1, steps=1), dict(ranks=2, count=7, steps=1), dict(ranks=3, count=10, steps=2),
                dict(ranks=4, count=4099, steps=3), dict(ranks=5, count=20011, steps=4),
                dict(ranks=4, count=70001, steps=1)]


@grader("ring_reduce_scatter_step", kernels=["ring_reduce_scatter_step"], cases=RS_CASES,
        emulator_cases=RS_EMU_CASES,  # bytes: every element of one chunk per rank, read twice and written once
        speed=dict(case=RS_CASES[-1], factor=2.0, bytes=12 * RS_CASES[-1]["count"]),
        hint=["blockIdx.y is the receiving rank r; at step s it receives chunk (r - 1 - s) mod n from rank r - 1 "
              "and adds it to its own copy of that chunk; in C, % of a negative number is negative",
              "c = ((r - 1 - step) % ranks + ranks) % ranks; the chunk is [c * count / ranks, (c + 1) * count / "
              "ranks) in 64-bit arithmetic; rows are count floats apart; the x dimension of the grid walks the "
              "chunk with a grid-stride loop",
              "prev = (r + ranks - 1) % ranks; begin = c * count / ranks; end = (c + 1) * count / ranks; for i = "
              "begin + blockIdx.x * blockDim.x + threadIdx.x; i < end; i += gridDim.x * blockDim.x: data[r * count "
              "+ i] += data[prev * count + i]"])
def ring_reduce_scatter_step(load: Any, case: dict[str, Any]) -> list[tuple[Any, Any]]:
    ranks, count, steps = case["ranks"], case["count"], case["steps"]
    host = np.random.default_rng().standard_normal((ranks, count)).astype(np.float32)
    data, whole = _aligned_device(host)
    k = load("ring_reduce_scatter_step")
    ref = host
    for s in range(steps):  # the steps in order, as the ring runs them; the reference follows in float64
        k((RS_BLOCKS_X, ranks), (RS_BLOCK,), (data, ranks, count, s))
        ref = reduce_scatter_step_ref(ref, s)
    cudl.sync()
    check_guard(whole, ranks * count, "data")
    return [(data, ref)]
