"""Chapter 12 kernels (attention, fp16 in, fp32 accumulate) against a float64 NumPy reference.

Fresh random inputs (queries scaled up so that scores spread over tens of units and the running maximum moves
from tile to tile), NaN-poisoned outputs, odd sequence lengths (1, 17, 100, 200: one key tile, a tail, several
tiles), batch x heads > 1, d = 64 and 128, causal and not. O is checked by relative error and the logsumexp
per row by absolute error. Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make
gpu-test`, where SDPA is a second reference. The emulator mimics an H100's shared-memory limit here (kernel 3
takes 96 KiB at d = 128); the sm_75 paths (m16n8k8, copies without cp.async) are forced with -DFLASH_SM75.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl

flash = cudl.kernels_module("12-flash-attention/flash.py")  # the chapter's launchers

TOL = 2e-3  # O: fp16 P and fp16 output round at ~5e-4; the kernels land near 2.5e-4
LSE_TOL = 1e-3  # natural-log units; fp32 sums land near 1e-6
KERNELS = [k for k in flash.FLASH if k not in flash.HOPPER]  # the emulator has no wgmma


@pytest.fixture(autouse=True)
def h100_limits(monkeypatch):
    monkeypatch.setenv("CUDL_EMULATOR_DEVICE", "H100")


def inputs(bh: int, S: int, d: int, q_scale: float = 4.0, rising: bool = False, quiet_first_8: bool = False):
    """Fresh fp16 Q, K, V; `rising`: key j scaled by 1 + j / 16, so that the scores of a row grow along the
    sequence and its running maximum moves at almost every tile, by far more than the kernels' SLACK;
    `quiet_first_8`: rows 0-7 of every 16 get queries 100 times smaller, so only rows 8-15 (the lanes' rows
    g + 8 in the mma layout) need their maximum raised."""
    rng = np.random.default_rng()
    q = rng.standard_normal((bh, S, d)) * q_scale
    k, v = (rng.standard_normal((bh, S, d)) for _ in range(2))
    if rising:
        k *= (1 + np.arange(S) / 16)[None, :, None]
    if quiet_first_8:
        q[:, np.arange(S) % 16 < 8] /= 100
    return [cudl.xp.asarray(a.astype(np.float16)) for a in (q, k, v)]


def errors(o, lse, ref) -> tuple[float, float]:
    """(relative error of O by norm, largest error of the logsumexp); NaN where an output holds NaN."""
    ro, rl = ref
    o = cudl.to_numpy(o).astype(np.float64)
    err = float(np.linalg.norm(o - ro) / np.linalg.norm(ro)) if np.isfinite(o).all() else float("nan")
    if lse is None:
        return err, 0.0
    lse = cudl.to_numpy(lse)
    return err, float(np.abs(lse - rl).max()) if np.isfinite(lse).all() else float("nan")


def check(name: str, bh: int, S: int, d: int, causal: bool, rising: bool = False, **build) -> None:
    q, k, v = inputs(bh, S, d, rising=rising)
    o, lse = flash.flash_attention(name, q, k, v, causal, **build)
    cudl.sync()
    err, lerr = errors(o, lse, flash.reference(q, k, v, causal))
    case = f"{name} {build} bh={bh} S={S} d={d} causal={causal}"
    assert err < TOL, f"{case}: O relative error {err:.2e} (NaN: an unwritten output)"
    assert lerr < LSE_TOL, f"{case}: logsumexp error {lerr:.2e}"


SIZES = [(3, 1), (2, 17), (2, 100)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("bh,S", SIZES, ids=[f"bh{b}-S{s}" for b, s in SIZES])
@pytest.mark.parametrize("name", KERNELS)
def test_flash(name, bh, S, d, causal):
    check(name, bh, S, d, causal)


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_several_tiles(name, causal):
    """200 keys: four tiles of 64 through the double buffer, the last one partial."""
    check(name, 2, 200, 64, causal)


@pytest.mark.parametrize("options", [(), ("-DSLACK=0",)], ids=["slack8", "slack0"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", KERNELS)
def test_flash_rescaling(name, causal, options):
    """Scores rising along the sequence: the warp's vote finds a row whose maximum passed m + SLACK at almost
    every tile, so m, l and O are rescaled there (with -DSLACK=0, whenever a row maximum grows at all)."""
    check(name, 2, 300, 64, causal, rising=True, options=options)


@pytest.mark.parametrize("name", KERNELS)
def test_flash_sm75_path(name):
    check(name, 2, 100, 64, True, sm75=True)


TILES = [dict(warps=8, bc=64), dict(warps=4, bc=32), dict(warps=2, bc=128), dict(warps=4, bc=32, stages=3),
         dict(warps=2, bc=64, stages=3), dict(warps=8, bc=64, stages=3), dict(warps=8, bc=128), dict(warps=4, bc=48),
         dict(warps=4, bc=80), dict(warps=4, bc=96), dict(warps=8, bc=128, stages=3), dict(warps=8, bc=112, stages=3)]


@pytest.mark.parametrize("build", TILES, ids=[f"w{b['warps']}-bc{b['bc']}-s{b.get('stages', 2)}" for b in TILES])
@pytest.mark.parametrize("name", KERNELS)
def test_flash_tile_shapes(name, build):
    """The tuning knobs of gpu_check.py give the same function (causal: the tile skipping moves with BR)."""
    check(name, 2, 150, 64, True, **build)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d,S", [(64, 17), (128, 100)])
def test_naive(d, S, causal):
    q, k, v = inputs(2, S, d)
    err, _ = errors(flash.naive_attention(q, k, v, causal), None, flash.reference(q, k, v, causal))
    assert err < TOL, f"naive S={S} d={d} causal={causal}: relative error {err:.2e}"


def test_wrong_result_is_caught():
    """The check can fail: the causal kernel compared with full attention is far outside the tolerance."""
    q, k, v = inputs(1, 100, 64)
    o, lse = flash.flash_attention(KERNELS[0], q, k, v, True)
    err, lerr = errors(o, lse, flash.reference(q, k, v, False))
    assert err > 10 * TOL and lerr > 10 * LSE_TOL


@pytest.mark.skipif(not cudl.on_gpu(), reason="SDPA needs PyTorch on a GPU")
@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_against_sdpa(name, causal):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    q, k, v = inputs(8, 1000, 128, q_scale=1.0)
    o, _ = flash.flash_attention(name, q, k, v, causal)
    t = [torch.from_dlpack(a).float().view(2, 4, 1000, 128) for a in (q, k, v)]
    ref = F.scaled_dot_product_attention(*t, is_causal=causal).reshape(8, 1000, 128).double().cpu().numpy()
    got = cudl.to_numpy(o).astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL


def hopper() -> bool:
    if not cudl.on_gpu():
        return False
    import cupy

    return cupy.cuda.Device().compute_capability == "90"


@pytest.mark.skipif(not hopper(), reason="wgmma needs an sm_90 GPU (the kernel is empty elsewhere)")
@pytest.mark.parametrize("warps", [4, 8, 12])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bh,S", [(3, 1), (2, 100), (2, 300)])
@pytest.mark.parametrize("name", [flash.WGMMA, "flash_attn_5_overlap"])
def test_flash_wgmma(name, bh, S, causal, warps):
    check(name, bh, S, 128, causal, warps=warps)


@pytest.mark.skipif(not hopper(), reason="wgmma needs an sm_90 GPU (the kernel is empty elsewhere)")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bh,S", [(3, 1), (2, 100), (2, 300)])
def test_flash_overlap_bc128(bh, S, causal):
    """Kernel 5 with tiles of 128 keys (two m64n64 wgmma per k step), the chapter's build."""
    check("flash_attn_5_overlap", bh, S, 128, causal, warps=8, bc=128)


WS_BUILDS = [dict(bc=128), dict(bc=128, options=("-DPINGPONG=0",)), dict(bc=128, stages=3),
             dict(bc=64), dict(bc=176), dict(bc=192), dict(bc=128, options=("-DQK_ZERO_FILL",)),
             dict(bc=128, stages=3, options=("-DPERSISTENT",)), dict(bc=176, options=("-DPERSISTENT",)),
             dict(bc=176, options=("-DQK_WIDE=0",))]
WS_IDS = ["bc128", "no-pingpong", "3-stages", "bc64", "bc176", "bc192", "zero-fill", "persistent", "bc176-persistent",
          "bc176-narrow"]


@pytest.mark.skipif(not hopper(), reason="TMA, setmaxnreg and wgmma need an sm_90 GPU")
@pytest.mark.parametrize("build", WS_BUILDS, ids=WS_IDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bh,S", [(3, 1), (2, 100), (2, 300), (1, 777), (300, 200)])
def test_flash_ws(bh, S, causal, build):
    """Kernel 6 (producer warpgroup with TMA, two consumers): tails, several tiles, 3 or 1 rounds of the ring;
    bh = 300 gives a persistent block (one per SM, without a mask) several work tiles of two key tiles each."""
    check(flash.WS, bh, S, 128, causal, warps=12, **build)


def test_flash_ws_refused_off_hopper():
    """Kernel 6 is not emulated and takes d = 128 only: the launcher says so instead of returning garbage."""
    if not cudl.on_gpu():
        q, k, v = inputs(1, 17, 128)
        with pytest.raises(RuntimeError, match="sm_90"):
            flash.flash_attention(flash.WS, q, k, v, False, warps=12)
    if hopper():
        q, k, v = inputs(1, 17, 64)
        with pytest.raises(ValueError, match="128"):
            flash.flash_attention(flash.WS, q, k, v, False, warps=12)
    with pytest.raises(ValueError, match="12 warps"):
        flash.flash_kernel(flash.WS, 128, warps=8)


# Plausible mistakes, made by editing one line of a kernel file: the check must reject each.
K2, K3 = "flash_attn_2_mma", "flash_attn_3_32rows"
MUTANTS = {
    "no-rescaling": (K2, "const float alpha = exp2_ftz(m[h] - base);", "const float alpha = 1.f;"),
    "rescale-inverted": (K3, "const float alpha = exp2_ftz(m[i][h] - base);",
                         "const float alpha = exp2_ftz(base - m[i][h]);"),
    "no-causal-mask": (K2, "if (key >= S || (causal && key > row)) s[nt][e] = NEG_INF;",
                       "if (key >= S) s[nt][e] = NEG_INF;"),
    "causal-mask-off-by-one": (K3, "(causal && key > row)) s[i][nt][e] = NEG_INF;",
                               "(causal && key >= row)) s[i][nt][e] = NEG_INF;"),
    "no-tail-mask": (K2, "if (key >= S || (causal && key > row)) s[nt][e] = NEG_INF;",
                     "if (causal && key > row) s[nt][e] = NEG_INF;"),
    "scale-not-folded": (K2, "exp2_ftz(fmaf(s[nt][2 * h], scale2, -base))",
                         "exp2_ftz(s[nt][2 * h] - base)"),
    "skips-diagonal-tile": (K2, "if (!causal || n0 <= wq + 15) {", "if (!causal || n0 + BC <= wq) {"),
    "p-fragment-halves-swapped": (K2, "pack_half2(s[2 * kk][2], s[2 * kk][3]),",
                                  "pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),"),
    "row-sum-not-reduced": (K3, "sum += __shfl_xor_sync(0xffffffffu, sum, 2);", ""),
    "no-wait-group": (K2, "cp_async_wait<1>();  // tile j has landed", "//"),
    "no-barrier-before-refill": (K3, "        __syncthreads();  // the slot is refilled", "//"),
    # 3 stages: the one barrier per tile comes before the refill of the slot of tile j - 1
    # the vote must cover both rows of the lane: rows g + 8's maxima run away, 2^(x - m) overflows fp16
    "vote-misses-a-row": (K2, "mx[0] > m[0] + SLACK || mx[1] > m[1] + SLACK)) {", "mx[0] > m[0] + SLACK)) {"),
    "3-stages-refill-before-barrier": (K2, "        __syncthreads();\n        if (j + 2 < tiles_n) {",
                                       "        if (j + 2 < tiles_n) {", dict(stages=3)),
}
# right by luck of order on the emulator: its race check must stop it. The race check does not see the writes
# of cp.async (they land inside wait_group), so the missing barrier is caught on the sm_75 path (plain stores).
RACES = {"no-barrier-before-refill", "3-stages-refill-before-barrier"}
RISING = {"vote-misses-a-row"}  # shows only where the scores grow along the sequence


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_is_rejected(mutant, mutated_kernel):
    name, old, new, *build = MUTANTS[mutant]
    source = mutated_kernel("12-flash-attention", name, old, new, race=mutant in RACES,
                            late_copy=mutant == "no-wait-group")
    q, k, v = inputs(2, 200, 64, rising=mutant in RISING, quiet_first_8=mutant in RISING)
    causal = mutant != "no-tail-mask"  # causal rows never reach the keys past S
    try:
        o, lse = flash.flash_attention(name, q, k, v, causal, source=source, sm75=mutant in RACES,
                                      **(build[0] if build else {}))
        cudl.sync()
    except cudl.KernelFault:  # e.g. the race check stops a launch without its barrier
        return
    err, lerr = errors(o, lse, flash.reference(q, k, v, causal))
    assert not (err < TOL and lerr < LSE_TOL), f"mutant {mutant} passes (error {err:.2e}, {lerr:.2e})"


@pytest.mark.parametrize("smem_kib", [227, 163, 64])  # an H100, an A100, a T4
def test_every_default_build_is_among_its_candidates(smem_kib):
    """cudl.autotune refuses a default outside its space: each GPU's default build must be a candidate, and
    each kernel of the chapter must have a space of at most 6 (each is compiled when tuning)."""
    builds = flash.chapter_builds(smem_kib * 1024)
    assert set(builds) == set(flash.SPACES)
    for label, (name, build) in builds.items():
        assert build in flash.SPACES[label], (label, smem_kib)
        assert name in flash.FLASH and 1 <= len(flash.SPACES[label]) <= 6


def test_tune_on_the_emulator_checks_the_default(monkeypatch, tmp_path):
    """On the emulator flash.tune builds, launches and checks the default only, and a wrong check fails it."""
    monkeypatch.setenv("CUDL_CACHE", str(tmp_path))
    label = "2 mma.sync"
    default = flash.chapter_builds(227 * 1024)[label]
    q, k, v = inputs(1, 40, 64)
    seen = []
    tuned = flash.tune(label, default, q, k, v, lambda kern: seen.append(kern.tile))
    assert tuned.config == default[1] and tuned.gain is None and seen == [tuned.kernel.tile]
    assert tuned.kernel.head_dim == 64

    def wrong(kern):
        raise AssertionError("wrong output")
    with pytest.raises(AssertionError, match="wrong output"):
        flash.tune(label, default, q, k, v, wrong)
