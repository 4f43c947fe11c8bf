"""Chapter 15 (capstone) kernels: the attention backward pass (kernels_src/15-capstone/) against float64.

dQ, dK and dV of flash_attn_bwd_prep.cu + the main kernel (version 1: flash_attn_bwd_1_smem.cu, plain CUDA C;
version 2: flash_attn_bwd_2_mma.cu, mma.sync, also on its sm_75 path; version 3: flash_attn_bwd_3_ldmatrix.cu,
ldmatrix, cp.async double buffering, causal skipping, 128 keys per block) are compared (by the norm of the
difference) with a float64 NumPy backward, given O and L of the float64 forward (rounded to the fp16 and float32
the kernels read) or of chapter 12's flash_attn_2_mma.
The tolerance is not a constant: attention_backward.error_bounds derives it from the inputs: a first-order
bound of every rounding (u16 = 2^-11 for each fp16 result and for O, u32 = 2^-24 for each fp32 operation),
weighted by the magnitudes of the terms of each sum (the condition of the sums), or, where smaller, 3 times
the root-mean-square of the independent fp16 roundings plus the fp32 part of that bound. The largest term is
O's fp16 rounding inside Dl = rowsum(dO O), which every dS = P (dP - Dl) of the row inherits: where dP - Dl
cancels (a peaked softmax) it dominates. Inputs are exact fp16 values on both sides, so their own rounding
adds nothing. Version 1 lands near 2e-4 relative (dV: its own fp16 rounding), versions 2 and 3 near 3e-4
(their fp16 P and dS), 2 to 5 times under the tolerance.
Fresh random inputs (tests/conftest.py prints the seed of a failure; CUDL_TEST_SEED reruns it), NaN-poisoned
outputs and dQ accumulator (the prep kernel must zero it), odd sequence lengths (1, 17, 45, 77, 150: one
partial tile, several tiles, the last partial; version 3 also 130 and 290: 2 and 3 key blocks of 128, the
last with 2 or 34 keys, up to 10 query tiles through its two cp.async stages), batch x heads > 1, d = 64 and
128, causal and not. Mutants of the main kernel (a mask one key off, a skipped last query tile, dQ without its
scale, wrong mma or ldmatrix fragments, a missing barrier under the race check, a missing cp.async wait, a
causal skip one warp too many) must fail the same check.
Version 3 needs 91-113 KiB of shared memory per block, more than a T4 allows: its tests run under an A100's
limits (CUDL_EMULATOR_DEVICE), the others under the T4's default.
Runs on the CPU emulator by default and on a GPU under `make gpu-test` (where tests/gpu/
test_attention_backward_gpu.py also compares with torch's SDPA backward).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import cudl
from cudl.compile import KERNELS_DIR

sys.path.insert(0, str(KERNELS_DIR / "15-capstone"))
import attention_backward as ab  # noqa: E402

D = "15-capstone"


@pytest.fixture(autouse=True)
def limits_for_the_version(request, monkeypatch):
    """The emulator enforces a T4's limits by default; version 3 (91-113 KiB of shared memory) gets an A100's,
    and on a GPU older than sm_80 (a T4: 64 KiB) its tests are skipped."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("version") == 3:
        if cudl.on_gpu() and float(cudl.device_info()["cc"]) < 8.0:
            pytest.skip("version 3 needs sm_80 or newer (91-113 KiB of shared memory per block)")
        monkeypatch.setenv("CUDL_EMULATOR_DEVICE", "A100")


def inputs(bh: int, S: int, d: int, q_scale: float = 1.0):
    """Fresh fp16 Q, K, V, dO; `q_scale` > 1 sharpens the softmax (scores over tens of units)."""
    rng = np.random.default_rng()
    q = rng.standard_normal((bh, S, d)) * q_scale
    k, v, do = (rng.standard_normal((bh, S, d)) for _ in range(3))
    return [cudl.xp.asarray(a.astype(np.float16)) for a in (q, k, v, do)]


def failures(case: str, got, ref, bounds) -> list[str]:
    """dq, dk, dv farther (by norm) from the reference than their bounds, or holding NaN (unwritten)."""
    out = []
    for name, a in zip(("dq", "dk", "dv"), got):
        a = cudl.to_numpy(a).astype(np.float64)
        err = float(np.linalg.norm(a - ref[name])) if np.isfinite(a).all() else float("nan")
        if not err <= bounds[name]:
            size = float(np.linalg.norm(ref[name])) or 1.0
            out.append(f"{case}: {name} error {err / size:.2e} > bound {bounds[name] / size:.2e} (relative to "
                       "||reference||; NaN: an output left unwritten)")
    return out


def run_check(bh: int, S: int, d: int, causal: bool, version: int, q_scale: float = 1.0, sm75: bool = False,
              source: str | None = None) -> list[str]:
    """The backward (main kernel `version`, or its build from `source`) from the float64 forward's O (as
    fp16) and L (as float32); the failures, if any."""
    q, k, v, do = inputs(bh, S, d, q_scale)
    ref = ab.reference(q, k, v, do, causal)
    o = cudl.xp.asarray(np.ascontiguousarray(ref["o"], np.float16))
    lse = cudl.xp.asarray(np.ascontiguousarray(ref["lse"], np.float32))
    kernel = ab.main_kernel(version, d, sm75=sm75, source=source)
    got = ab.backward(q, k, v, o, lse, do, causal, kernel=kernel)
    cudl.sync()
    case = f"version {version}{' sm75' if sm75 else ''} bh={bh} S={S} d={d} causal={causal} q_scale={q_scale}"
    return failures(case, got, ref, ab.error_bounds(q, k, v, do, ref, fp16_p=version >= 2))


SIZES = [(3, 1), (2, 17), (2, 45)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("bh,S", SIZES, ids=[f"bh{b}-S{s}" for b, s in SIZES])
@pytest.mark.parametrize("version", ab.VERSIONS)
def test_backward(version, bh, S, d, causal):
    failures = run_check(bh, S, d, causal, version)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("version", ab.VERSIONS)
def test_backward_several_tiles_peaked(version, causal):
    """150 rows: 5 key blocks and 5 query tiles of 32 (version 2: 3 of 64; version 3: 2 key blocks of 128),
    the last partial, with scores over tens of units (q 4x larger): dP - Dl cancels in most rows, where O's
    rounding weighs most."""
    failures = run_check(2, 150, 64, causal, version, q_scale=4.0)
    assert not failures, "\n".join(failures)


V3_SIZES = [(2, 130), (1, 290)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("bh,S", V3_SIZES, ids=[f"bh{b}-S{s}" for b, s in V3_SIZES])
@pytest.mark.parametrize("version", [3])
def test_version3_key_blocks_and_stages(version, bh, S, d, causal):
    """Version 3 over several key blocks of 128: S = 130 leaves the second block 2 keys (one warp with work,
    its other keys masked; causal: one query tile, the diagonal's); S = 290 gives 3 blocks and 5 query tiles
    of 64 (d = 128: 10 of 32), so both cp.async stages are refilled several times, and under the causal mask
    tiles where some warps skip, some mask the diagonal and some run unmasked."""
    failures = run_check(bh, S, d, causal, version)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("d", [64, 128])
def test_mma_sm75_path(d):
    """Version 2 with the T4's two m16n8k8 per k16 step (TC_SM75), which the emulator runs on its own."""
    failures = run_check(2, 77, d, True, 2, sm75=True)
    assert not failures, "\n".join(failures)


def test_prep_zeroes_dq_and_sums_rows():
    """Dl = rowsum(dO O) in fp32 (within 64 u32 of the sum of magnitudes) and a zeroed dQ accumulator."""
    rng = np.random.default_rng()
    rows, d = 37, 64
    o, do = (rng.standard_normal((rows, d)).astype(np.float16) for _ in range(2))
    prep = ab.kernels(d)[0]
    dl, acc = cudl.poisoned(rows), cudl.poisoned((rows, d))
    prep((ab.cdiv(rows, ab.PREP_ROWS),), 32 * ab.PREP_ROWS,
         (rows, d, cudl.xp.asarray(o), cudl.xp.asarray(do), dl, acc))
    o64, do64 = o.astype(np.float64), do.astype(np.float64)
    bound = d * ab.U32 * np.abs(o64 * do64).sum(axis=1)
    assert (np.abs(cudl.to_numpy(dl) - (o64 * do64).sum(axis=1)) <= bound).all()
    assert (cudl.to_numpy(acc) == 0).all()


@pytest.mark.parametrize("version", ab.VERSIONS)
def test_with_chapter12_forward(version):
    """The pair as training runs it: O and L from chapter 12's flash_attn_2_mma, then the backward, within
    a bound that adds the forward's own errors of O and L (attention_backward.forward_error_bounds)."""
    bh, S, d, causal = 2, 45, 64, True
    q, k, v, do = inputs(bh, S, d)
    o, lse = ab.forward(q, k, v, causal)
    ref = ab.reference(q, k, v, do, causal)
    got = ab.backward(q, k, v, o, lse, do, causal, version=version)
    cudl.sync()
    o_err, lse_err = ab.forward_error_bounds(q, k, v, ref)
    bounds = ab.error_bounds(q, k, v, do, ref, o_err=o_err, lse_err=lse_err, fp16_p=version >= 2)
    bad = failures(f"version {version} after chapter 12's forward", got, ref, bounds)
    assert not bad, "\n".join(bad)


# (version, name): (line of the kernel, replacement, kind): one slip each; a "race" mutant (a missing barrier)
# runs under the emulator's race check, a "late copy" one (a missing cp.async wait) reads the NaN the emulator
# leaves in a copy's destination until its wait (tests/conftest.py mutated_kernel). Version 3 runs at S = 130,
# causal (its first query tile is full, so only the diagonal test masks it), then, if that passed, not causal
# (where the second key block's 2 keys are seen by every row: a skipped key weighs ~1/10 of dK and dV).
MUTANTS = {
    (1, "diagonal masked"): ("causal && key > row", "causal && key >= row", ""),
    (1, "last query tile skipped"): ("q0 < S; q0 += BR", "q0 + BR <= S; q0 += BR", ""),
    (1, "dQ without scale"): ("a += dSs[r][c] * __half2float(Ks[c][cd]);",
                              "a += dSs[r][c] * __half2float(Ks[c][cd]) / scale;", ""),
    (2, "dS fragment of dQ: row g twice"): ("pair(dSs, BCP, r0 + g + 8, c + 8)}",
                                            "pair(dSs, BCP, r0 + g, c + 8)}", ""),
    (2, "B fragment of dV, dK: k pairs 8 apart"): ("column_pair(Y, r + 8, 8 * dt + g)",
                                                   "column_pair(Y, r + 1, 8 * dt + g)", ""),
    (2, "dS read before every warp wrote it"): ("__syncthreads();  // dSs is complete", "", "race"),
    (3, "Q, dO read before every thread's copies landed"): (
        "__syncthreads();  // everyone's; and no warp still reads tile j - 1 or dSs", "", "race"),
    (3, "dS read before every warp wrote it"): ("__syncthreads();  // dSs is complete", "", "race"),
    (3, "tile read before its cp.async wait"): (
        "cp_async_wait<0>();  // this thread's copies of tile j have landed", "", "late copy"),
    (3, "the last, partial warp of keys skipped"): (
        "const int nk = min(BC / 16, (kmax + 15) / 16);", "const int nk = min(BC / 16, kmax / 16);", ""),
    (3, "causal: the diagonal's last warp of keys skipped"): (
        "min(S, causal ? q0 + BR : S)", "min(S, causal ? q0 + BR - 16 : S)", ""),
    (3, "diagonal tile not masked"): ("(causal && key_hi > q0)", "(causal && key_hi > q0 + BR)", ""),
    (3, "ldmatrix.trans rows of dV, dK: matrices 1 and 3 on rows 0-7"): (
        "const __half* yb = Y + (lane % 16) * DP + 8 * (lane / 16);",
        "const __half* yb = Y + (lane % 8) * DP + 8 * (lane / 16);", ""),
    (3, "dQ's float4: odd lanes' halves swapped"): (
        "const float4 v = odd ? make_float4(x, y, c[2], c[3])",
        "const float4 v = odd ? make_float4(c[2], c[3], x, y)", ""),
}


@pytest.mark.parametrize("version,mutant", MUTANTS, ids=[f"v{v}-{m}" for v, m in MUTANTS])
def test_check_fails_on_mutants(version, mutant, mutated_kernel):
    """The same check fails on kernels with one slip each (a test that cannot fail proves nothing)."""
    old, new, kind = MUTANTS[version, mutant]
    src = mutated_kernel(D, ab.VERSIONS[version], old, new, race=kind == "race", late_copy=kind == "late copy")
    bh, S = (1, 130) if version == 3 else (2, 45)
    failures = []
    for causal in (True, False) if version == 3 else (True,):
        try:
            failures = failures or run_check(bh, S, 64, causal, version, source=src)
        except cudl.KernelFault as fault:  # the race check stops the launch
            failures = [str(fault)]
    assert failures, f"the check passes a kernel with {mutant}"


def test_reference_matches_torch_autograd():
    """ab.reference's gradients are torch.autograd's of the same float64 attention (skipped without torch)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    for causal in (False, True):
        q, k, v, do = (rng.standard_normal((2, 13, 8)) for _ in range(4))
        ref = ab.reference(q, k, v, do, causal)
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        s = tq @ tk.transpose(1, 2) / math.sqrt(8)
        if causal:
            s = s.masked_fill(torch.ones(13, 13, dtype=torch.bool).triu(1), -math.inf)
        o = torch.softmax(s, dim=-1) @ tv
        o.backward(torch.tensor(do))
        for name, t in (("o", o), ("dq", tq.grad), ("dk", tk.grad), ("dv", tv.grad)):
            np.testing.assert_allclose(ref[name], t.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
