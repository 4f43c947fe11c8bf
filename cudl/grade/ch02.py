"""Graders of chapter 2 (the execution and memory model): a coalesced transpose, a coalesced row gather, and
the challenge: swapping the outer and inner axes of a 3D tensor through a padded shared-memory tile.

Graders check correctness (the challenge is timed on a GPU as well). Every output buffer is followed by a
guard of sentinel values, so a write past its end is caught on the GPU too, where it would not fault, and named
in a CRASH line.
"""

from __future__ import annotations

import numpy as np

import cudl
from cudl.grade import grader
from cudl.grade.guard import check_guard, guarded_output

GUARD = 4096  # elements after each output; larger than what one stray row of blocks can overrun
SENTINEL = 12345.0  # what the guard must still hold after the kernel


TILE = 32  # tile edge = block edge of the transpose launch


@grader("transpose", kernels=["transpose"],
        cases=[dict(rows=1, cols=1), dict(rows=1, cols=37), dict(rows=33, cols=1), dict(rows=31, cols=33),
               dict(rows=64, cols=64), dict(rows=100, cols=257), dict(rows=1000, cols=1025),
               dict(rows=2048, cols=4096)],
        emulator_cases=[dict(rows=1, cols=1), dict(rows=1, cols=37), dict(rows=33, cols=1), dict(rows=31, cols=33),
                        dict(rows=64, cols=64), dict(rows=100, cols=257), dict(rows=129, cols=300),
                        dict(rows=300, cols=129)],
        hint=["a block reads tile (blockIdx.y, blockIdx.x) of `in` and writes it as tile (blockIdx.x, blockIdx.y) "
              "of `out`; on both sides consecutive threadIdx.x must touch consecutive addresses, so the "
              "transposition happens in shared memory, after a barrier",
              "load tile[threadIdx.y][threadIdx.x] from row blockIdx.y * 32 + threadIdx.y, column blockIdx.x * 32 + "
              "threadIdx.x of `in`; __syncthreads(); each thread then writes tile[threadIdx.x][threadIdx.y]; the "
              "read and the write need their own bounds checks (out is cols x rows)",
              "read in[row * cols + col] with row = blockIdx.y * 32 + threadIdx.y and col = blockIdx.x * 32 + "
              "threadIdx.x into tile[threadIdx.y][threadIdx.x]; __syncthreads(); then write tile[threadIdx.x]"
              "[threadIdx.y] to out[(blockIdx.x * 32 + threadIdx.y) * rows + blockIdx.y * 32 + threadIdx.x]; "
              "guard both the read and the write with their own bounds check"])
def transpose(load, case):
    rows, cols = case["rows"], case["cols"]
    x = cudl.randn((rows, cols))
    out, whole = guarded_output((cols, rows), fill=SENTINEL, guard=GUARD)
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)
    load("transpose")(grid, (TILE, TILE), (x, whole, rows, cols))
    ref = cudl.to_numpy(x).astype(np.float64).T
    check_guard(whole, rows * cols, "out", fill=SENTINEL)
    return [(out, ref)]


GATHER_BLOCK = 128  # threads per block of the gather launch, along the embedding dimension


@grader("embedding_gather", kernels=["embedding_gather"],
        cases=[dict(n_idx=1, vocab=1, dim=1), dict(n_idx=5, vocab=7, dim=127), dict(n_idx=33, vocab=10, dim=128),
               dict(n_idx=100, vocab=1000, dim=129), dict(n_idx=4096, vocab=32000, dim=768),
               dict(n_idx=20000, vocab=3000, dim=1000)],
        emulator_cases=[dict(n_idx=1, vocab=1, dim=1), dict(n_idx=5, vocab=7, dim=127),
                        dict(n_idx=33, vocab=10, dim=128), dict(n_idx=100, vocab=1000, dim=129),
                        dict(n_idx=64, vocab=500, dim=300), dict(n_idx=257, vocab=50, dim=64)],
        hint=["output row r is a copy of table row idx[r]: a thread copies one float, and the threads of a warp "
              "copy consecutive floats of the same row; dim is not always a multiple of the block",
              "the column comes from blockIdx.x, blockDim.x and threadIdx.x, the output row is blockIdx.y; the "
              "table row to read is idx[r], and a row is dim floats long",
              "c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y; if (c < dim) "
              "out[r * dim + c] = table[idx[r] * dim + c]"])
def embedding_gather(load, case):
    n_idx, vocab, dim = case["n_idx"], case["vocab"], case["dim"]
    table = cudl.randn((vocab, dim))
    idx_host = np.random.default_rng().integers(0, vocab, n_idx, dtype=np.int32)
    idx = cudl.xp.asarray(idx_host)
    out, whole = guarded_output((n_idx, dim), fill=SENTINEL, guard=GUARD)
    grid = ((dim + GATHER_BLOCK - 1) // GATHER_BLOCK, n_idx)
    load("embedding_gather")(grid, (GATHER_BLOCK,), (table, idx, whole, n_idx, dim))
    ref = cudl.to_numpy(table).astype(np.float64)[idx_host]
    check_guard(whole, n_idx * dim, "out", fill=SENTINEL)
    return [(out, ref)]


# ------------------------------------------------------------------------------ challenge: swap two axes

SWAP_TILE, SWAP_ROWS = 32, 8  # blocks of 32 x 8 threads move a 32 x 32 tile: 4 elements per thread


@grader("swap_axes", kernels=["swap_axes"],
        cases=[dict(d0=1, d1=1, d2=1), dict(d0=1, d1=3, d2=37), dict(d0=33, d1=2, d2=1),
               dict(d0=31, d1=3, d2=33), dict(d0=64, d1=1, d2=64), dict(d0=100, d1=7, d2=257),
               dict(d0=1000, d1=5, d2=1025), dict(d0=1024, d1=8, d2=2048)],
        emulator_cases=[dict(d0=1, d1=1, d2=1), dict(d0=1, d1=3, d2=37), dict(d0=33, d1=2, d2=1),
                        dict(d0=31, d1=3, d2=33), dict(d0=64, d1=1, d2=64), dict(d0=100, d1=7, d2=257),
                        dict(d0=129, d1=2, d2=300), dict(d0=300, d1=3, d2=129)],
        speed=dict(case=dict(d0=1024, d1=8, d2=2048), factor=1.5),  # H100: unpadded 1.58x, naive 5.9x
        hint=["for each j = blockIdx.z, the block moves one 32 x 32 tile of the (i, k) plane: read it along k "
              "(contiguous in `in`), wait for the whole tile, write it along i (contiguous in `out`); each "
              "of the 8 thread rows handles rows threadIdx.y, threadIdx.y + 8, ... of the tile",
              "read: k = blockIdx.x * 32 + threadIdx.x, i = blockIdx.y * 32 + r for r = threadIdx.y; r < 32; "
              "r += 8, tile[r][threadIdx.x] = in[(i * d1 + j) * d2 + k]; write: i = blockIdx.y * 32 + "
              "threadIdx.x, k = blockIdx.x * 32 + r, out[(k * d1 + j) * d0 + i] = tile[threadIdx.x][r]",
              "__shared__ float tile[32][33] (the padding column puts a column of the tile on 32 banks); "
              "__syncthreads() between the two loops; each load and each store checks i < d0 && k < d2"])
def swap_axes(load, case):
    d0, d1, d2 = case["d0"], case["d1"], case["d2"]
    x = cudl.randn((d0, d1, d2))
    out, whole = guarded_output((d2, d1, d0), fill=SENTINEL, guard=GUARD)
    grid = ((d2 + SWAP_TILE - 1) // SWAP_TILE, (d0 + SWAP_TILE - 1) // SWAP_TILE, d1)
    load("swap_axes")(grid, (SWAP_TILE, SWAP_ROWS), (x, whole, d0, d1, d2))
    ref = np.ascontiguousarray(cudl.to_numpy(x).astype(np.float64).transpose(2, 1, 0))
    check_guard(whole, d0 * d1 * d2, "out", fill=SENTINEL)
    return [(out, ref)]
