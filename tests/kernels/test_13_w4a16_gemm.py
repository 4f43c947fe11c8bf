"""Chapter 13's W4A16 GEMM on Tensor Cores (gemm_w4a16_mma.cu, launcher w4a16_gemm.py) against float64.

Weights in the chapter's int4 format (quantize_int4_ref, bit-exact with quantize.cu), shuffled by the
launcher; fresh random inputs every run; Y NaN-poisoned with a NaN guard after it. Batches 1-16 (one and two
n8 tiles), one and several slices of K (the split-K fix-up), warps with several steps and with none, short
last steps, scale groups of 128 and 64, and the sm_75 mma. The check must fail on plausible slips: a shuffle
that swaps two nibbles of one lane, a kernel that scales row g + 8 with row g's scale.
Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.errors import CudlError
from cudl.grade.ch13 import quantize_int4_ref

D = "13-quantization"
GUARD = 64  # NaN elements after Y
w4 = cudl.kernels_module(f"{D}/w4a16_gemm.py")

# Small blocks (2 warps of 2 row tiles, 2 chunks per step): several steps per warp and short last steps
# at small K. The default configurations (w4.CONFIG) run the first shape.
SMALL = dict(MT=2, WARPS=2, UNROLL=2)
SM75 = {**SMALL, "TC_SM75": 1}  # the sm_75 path: two m16n8k8 per m16n8k16
# (N, K, group, batch, splits (None: the launcher's default), options)
CASES = [
    *[(256, 384, 128, b, s, {}) for b, s in ((1, None), (3, 3), (8, 2), (16, 6))],  # 6 chunks: 1-3 per slice
    *[(128, 1024, 128, b, s, SMALL) for b, s in ((1, 1), (3, 3), (8, 2), (16, 5))],  # slices of 3-16 chunks
    (128, 512, 64, 5, 2, SMALL),  # two scale groups per 128 columns
    (128, 256, 128, 9, 2, SM75),
]


def error_bound(x: np.ndarray, w: np.ndarray, ref: np.ndarray, splits: int, warps: int) -> np.ndarray:
    """The largest |Y - Y_exact| the kernel may have, per element (x B x K, w N x K exact, in float64).

    Every product q x is exact in fp32 (4 and 11 bits of significand). A term then passes through at most
    d = 64 (a chunk's sum, in the mma) + K / 64 (the chunks of a warp, each added by an FMA with its scale)
    + warps + splits fp32 additions: |error| <= d u sum_k |s q x| with u = 2^-24 (gamma_d, first order).
    Tensor Cores may truncate instead of round inside the mma (2u per addition): 4u = 2^-22 leaves room
    for that. Rounding the result to fp16 then adds 2^-11 of it (round to nearest), or 2^-25 below fp16's
    normal range: |got - exact| <= 2^-11 (|exact| + acc) + acc + 2^-25.
    """
    d = 64 + x.shape[1] // 64 + warps + splits
    acc = d * 2.0**-22 * (np.abs(x) @ np.abs(w).T)
    return 2.0**-11 * (np.abs(ref) + acc) + acc + 2.0**-25


def failures(N: int, K: int, group: int, batch: int, splits: int | None, opts: dict, mutate=None,
             source: str | None = None) -> list[str]:
    """Quantize, shuffle (then `mutate` the shuffled words, if given), launch twice; what is wrong."""
    rng = np.random.default_rng()
    p, s = quantize_int4_ref(rng.standard_normal((N, K)).astype(np.float32), group)
    wq, ws = w4.shuffle_weights(p, s, group)
    if mutate is not None:
        wq = mutate(wq)
    x = rng.standard_normal((batch, K)).astype(np.float16)
    ybuf = cudl.poisoned(batch * N + GUARD, np.float16)
    y = ybuf[: batch * N].reshape(batch, N)
    run = w4.gemm_w4a16(cudl.xp.asarray(wq), cudl.xp.asarray(ws), cudl.xp.asarray(x), y, group,
                        splits=splits, source=source, **opts)
    run()
    cudl.sync()
    out = cudl.to_numpy(ybuf)
    assert np.isnan(out[batch * N:]).all(), "wrote past the end of Y"
    got = out[: batch * N].reshape(batch, N).astype(np.float64)
    w = w4.dequantized(p, s, group)
    ref = x.astype(np.float64) @ w.T
    warps = opts.get("WARPS", w4.CONFIG[1 if batch <= 8 else 2]["WARPS"])
    bound = error_bound(x.astype(np.float64), w, ref, run.splits, warps)
    bad = ~(np.abs(got - ref) <= bound)  # NaN (an unwritten output) is bad
    if bad.any():
        b, n = np.argwhere(bad)[0]
        rel = np.linalg.norm(np.nan_to_num(got - ref, nan=1e9)) / np.linalg.norm(ref)
        return [f"{bad.sum()} of {bad.size} outputs off the bound (first Y[{b}, {n}] = {got[b, n]}, expected "
                f"{ref[b, n]:.6g} +- {bound[b, n]:.2e}); relative error by norm {rel:.2e}"]
    if run.counters is not None and cudl.to_numpy(run.counters).any():
        return ["split-K counters not back to zero after the launch"]
    y.fill(np.nan)  # a second launch: the same bits (deterministic sums, counters reset)
    run()
    cudl.sync()
    if not np.array_equal(cudl.to_numpy(y).astype(np.float64), got):
        return ["a second launch gave other bits"]
    return []


CONFIG_NAME = {id(SMALL): "small", id(SM75): "sm75"}


@pytest.mark.parametrize("N,K,group,batch,splits,opts", CASES,
                         ids=[f"{n}x{k}-g{g}-B{b}-splits{s}-{CONFIG_NAME.get(id(o), 'default')}"
                              for n, k, g, b, s, o in CASES])
def test_gemm_w4a16(N, K, group, batch, splits, opts):
    bad = failures(N, K, group, batch, splits, opts)
    assert not bad, "\n".join(bad)


def swap_nibbles(wq: np.ndarray, lane: int = 5, p: int = 0, q: int = 4) -> np.ndarray:
    """The shuffled words with nibbles p and q of every word of one lane swapped (a shuffle slip)."""
    wq = wq.copy()
    v = wq[:, :, lane, :]
    a, b = (v >> np.uint32(4 * p)) & np.uint32(15), (v >> np.uint32(4 * q)) & np.uint32(15)
    keep = ~np.uint32((15 << 4 * p) | (15 << 4 * q))
    wq[:, :, lane, :] = (v & keep) | (a << np.uint32(4 * q)) | (b << np.uint32(4 * p))
    return wq


def test_check_fails_on_swapped_nibbles():
    """Columns 4s and 4s + 1 of row g swapped in lane 5's words: the check must see it."""
    assert failures(256, 384, 128, 3, 1, {}, mutate=swap_nibbles), "the check passes swapped nibbles"


def test_check_fails_on_wrong_row_scale(mutated_kernel):
    """Rows g + 8 of each tile scaled with row g's scale: the check must see it."""
    src = mutated_kernel(D, "gemm_w4a16_mma", "acc[i][j][2] = fmaf(sv[u][i].y", "acc[i][j][2] = fmaf(sv[u][i].x")
    assert failures(256, 384, 128, 3, 1, {}, source=src), "the check passes row g's scale on row g + 8"


def test_shuffle_layout():
    """shuffle_weights puts row g + 8 h, column 16 t + 4 s + e of a tile and chunk at lane 4 g + t, word s,
    nibble h + 2 (e // 2) + 4 (e % 2) (the header of gemm_w4a16_mma.cu), and scales at [tile, group, g, h]."""
    rng = np.random.default_rng()
    N, K, group = 32, 256, 128
    q = rng.integers(-8, 8, size=(N, K))
    p = ((q[:, 0::2] + 8) | ((q[:, 1::2] + 8) << 4)).astype(np.uint8)
    s = rng.standard_normal(N * K // group).astype(np.float32)
    wq, ws = w4.shuffle_weights(p, s, group)
    assert wq.dtype == np.uint32 and wq.shape == (N // 16, K // 64, 32, 4)
    for _ in range(200):
        n, k = int(rng.integers(N)), int(rng.integers(K))
        tile, h, g, c, t, s4, e = n // 16, n % 16 // 8, n % 8, k // 64, k % 64 // 16, k % 16 // 4, k % 4
        nib = (int(wq[tile, c, 4 * g + t, s4]) >> 4 * (h + 2 * (e // 2) + 4 * (e % 2))) & 15
        assert nib - 8 == q[n, k], (n, k)
        assert ws[tile, k // group, g, h] == s.reshape(N, K // group)[n, k // group]


def test_tune():
    """w4.tune: every candidate of its space is a valid launch; on the emulator the default build is
    built, launched and checked (and a wrong result raises); on a GPU the chosen build passes the check."""
    rng = np.random.default_rng()
    N, K, batch = 256, 384, 11
    p, s = quantize_int4_ref(rng.standard_normal((N, K)).astype(np.float32), 128)
    wq, ws = (cudl.xp.asarray(a) for a in w4.shuffle_weights(p, s))
    x = cudl.xp.asarray(rng.standard_normal((batch, K)).astype(np.float16))
    y = cudl.poisoned((batch, N), np.float16)
    ref = w4.reference(p, s, x)

    def check(run):
        y.fill(np.nan)
        run()
        cudl.check(y, ref, rtol=4e-3, name="tuned W4A16 GEMM")

    tuned = w4.tune(wq, ws, x, y, check)
    assert tuned.config in [r["config"] for r in tuned.table]
    if not cudl.on_gpu():
        assert tuned.config == tuned.default and tuned.gain is None
    check(tuned.kernel)
    with pytest.raises((AssertionError, CudlError)):  # the check's error; on a GPU: every candidate failed
        w4.tune(wq, ws, x, y, lambda run: check(lambda: (run(), y.fill(0))))  # a launch that writes zeros
