"""Chapter 14's peer ring (ring_allreduce.py, --transport peer) without GPUs: n virtual ranks follow
peer_ring_steps step by step on NumPy buffers, one barrier between steps, with the chunks of split().
Every rank must end with the float64 sum within float32 rounding, all ranks bitwise equal; and the
schedule must be race-free: in no step does a rank write the chunk its next neighbour reads. Last,
PeerRing.__call__ itself runs on threads, one per rank, with CPU tensors for the symmetric buffers.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from cudl.compile import KERNELS_DIR

HERE = KERNELS_DIR / "14-multi-gpu"
U32, U64 = 2.0**-24, 2.0**-53  # unit roundoff of float32 and float64
WORLDS = [2, 3, 4, 5, 8]


def ring_module():
    pytest.importorskip("torch")  # ring_allreduce.py imports torch at the top
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import ring_allreduce

    return ring_allreduce


def counts_for(world: int) -> list[int]:
    """Empty chunks (fewer than n x 64 elements), counts not divisible by n, and several full chunks."""
    return sorted({1, 2, world - 1, world + 1, 63, 64, 65, 64 * world - 1, 64 * world + 3, 1000, 4099})


def simulate(world: int, count: int, rng: np.random.Generator, steps=None):
    """Run the peer ring on `world` virtual ranks; returns (inputs, each rank's buffer S[:count]).

    A barrier before every step: at step s every rank reads its previous rank's buffer as the barrier
    left it (a snapshot) and writes its own. S is longer than x and NaN-filled, as PeerRing's is.
    """
    ra = ring_module()
    steps = steps or ra.peer_ring_steps
    chunks = ra.split(0, count, world)
    xs = [rng.standard_normal(count).astype(np.float32) for _ in range(world)]
    bufs = [np.full(count + 7, np.nan, np.float32) for _ in range(world)]
    for buf, x in zip(bufs, xs):
        buf[:count] = x  # the copy-in
    schedule = [steps(r, world) for r in range(world)]
    for s in range(len(schedule[0])):
        seen = [buf.copy() for buf in bufs]  # the barrier: what every rank's buffer holds now
        for r in range(world):
            op, c = schedule[r][s]
            a, b = chunks[c]
            prev = seen[(r - 1) % world]
            if op == "add":
                bufs[r][a:b] += prev[a:b]
            else:
                bufs[r][a:b] = prev[a:b]
    return xs, [buf[:count] for buf in bufs]


@pytest.mark.parametrize("world", WORLDS)
def test_peer_ring_sums_within_float32_rounding(world):
    rng = np.random.default_rng()
    for count in counts_for(world):
        xs, outs = simulate(world, count, rng)
        terms = np.stack(xs).astype(np.float64)
        ref, mag = terms.sum(0), np.abs(terms).sum(0)
        # each element is a float32 sum of n terms in some order: |error| <= gamma_(n-1) * sum|terms|,
        # gamma_k = k u / (1 - k u); plus the float64 reference's own rounding
        bound = ((world - 1) * U32 / (1 - (world - 1) * U32) + (world - 1) * U64 / (1 - (world - 1) * U64)) * mag
        for r, out in enumerate(outs):
            assert not np.isnan(out).any(), f"world={world} count={count} rank {r}: an element never summed"
            err = np.abs(out.astype(np.float64) - ref)
            assert (err <= bound).all(), (world, count, r, float((err - bound).max()))
            assert np.array_equal(out, outs[0]), f"world={world} count={count}: rank {r} differs from rank 0"


def check_race_free(world: int, steps) -> None:
    """With a barrier before each step only, a step must not write what another rank reads in it, and
    every read must see a finished value: contributions tracked as sets of ranks, chunk by chunk."""
    schedule = [steps(r, world) for r in range(world)]
    assert all(len(sch) == 2 * (world - 1) for sch in schedule)
    everyone = frozenset(range(world))
    held = [[frozenset({r})] * world for r in range(world)]  # held[r][c]: whose x chunk c of S_r sums
    for s in range(2 * (world - 1)):
        for r in range(world):
            nxt = (r + 1) % world
            (_, written), (_, read_by_next) = schedule[r][s], schedule[nxt][s]
            assert written != read_by_next, f"world={world} step {s}: rank {r} writes chunk {written} of " \
                                            f"its buffer while rank {nxt} reads it"
        seen = [list(h) for h in held]
        for r in range(world):
            op, c = schedule[r][s]
            mine, prev = seen[r][c], seen[(r - 1) % world][c]
            if op == "add":
                assert not mine & prev, f"world={world} step {s} rank {r}: chunk {c} counted twice"
                held[r][c] = mine | prev
            else:  # prev's chunk must be complete since the previous step, or the copy spreads a part sum
                assert prev == everyone, f"world={world} step {s} rank {r}: copies chunk {c} summed " \
                                         f"over {sorted(prev)} only"
                held[r][c] = prev
        if s == world - 2:  # after the reduce-scatter, rank r holds the whole sum of chunk r + 1
            assert all(held[r][(r + 1) % world] == everyone for r in range(world)), "reduce-scatter incomplete"
    assert all(h == everyone for row in held for h in row), "after the all-gather every chunk is whole"


@pytest.mark.parametrize("world", WORLDS)
def test_peer_ring_is_race_free(world):
    check_race_free(world, ring_module().peer_ring_steps)


def test_peer_ring_schedule_shape():
    ra = ring_module()
    assert ra.peer_ring_steps(0, 1) == []
    assert ra.peer_ring_steps(1, 4) == [("add", 0), ("add", 3), ("add", 2), ("copy", 1), ("copy", 0),
                                        ("copy", 3)]


def test_a_wrong_schedule_fails():
    """The checks above catch a plausible slip: reduce-scatter on chunk (rank - s) instead of (rank - s - 1)."""
    ra = ring_module()

    def wrong(rank: int, world: int) -> list[tuple[str, int]]:
        return [("add", (rank - s) % world) for s in range(world - 1)] + ra.peer_ring_steps(rank, world)[world - 1:]

    rng = np.random.default_rng(0)
    for world in WORLDS:
        with pytest.raises(AssertionError):
            check_race_free(world, wrong)
        xs, outs = simulate(world, 64 * world + 3, rng, steps=wrong)
        ref = np.stack(xs).astype(np.float64).sum(0)
        assert not all(np.allclose(out, ref, rtol=1e-5, atol=1e-5) for out in outs)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_peer_ring_call_on_threads(world):
    """PeerRing.__call__ itself, with one thread per rank, CPU tensors for the symmetric buffers and a
    threading.Barrier for the GPU barrier: several calls in a row, new inputs and sizes each time."""
    import threading

    ra = ring_module()
    import torch

    cap = 64 * world + 5
    bufs = [torch.full((cap,), float("nan")) for _ in range(world)]
    barrier = threading.Barrier(world, timeout=60)

    class ThreadRing(ra.PeerRing):
        def __init__(self, rank: int) -> None:  # what PeerRing.__init__ sets up on GPUs
            self.rank, self.world, self.cap = rank, world, cap
            self.buf, self.prev_buf = bufs[rank], bufs[(rank - 1) % world]
            self.reduce = ra.torch_reduce

        def barrier(self) -> None:
            barrier.wait()

    counts = [1, world - 1, 3, cap, 64 * world - 1, 65] * 3
    gen = torch.Generator().manual_seed(0)
    inputs = [[torch.randn(count, generator=gen) for _ in range(world)] for count in counts]
    outs: list[list] = [[None] * world for _ in counts]

    def run(rank: int) -> None:
        ring = ThreadRing(rank)
        for call, xs in enumerate(inputs):
            outs[call][rank] = ring(xs[rank].clone())

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for call, xs in enumerate(inputs):
        ref = torch.stack([x.double() for x in xs]).sum(0)
        bound = 2 * (world - 1) * U32 * torch.stack([x.double().abs() for x in xs]).sum(0)
        for r in range(world):
            got = outs[call][r]
            assert got is not None and ((got.double() - ref).abs() <= bound).all(), (call, r)
            assert torch.equal(got, outs[call][0]), (call, r)
