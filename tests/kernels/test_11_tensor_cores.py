"""Chapter 11 kernels (fp16 in, fp32 accumulate) against a float64 NumPy product.

Fresh random fp16 inputs, NaN-poisoned outputs (with a NaN guard after C), sizes that are multiples of
each kernel's tile (the kernels document that requirement and do not check it). Runs on the CPU emulator
by default (tests/conftest.py) and on a GPU under `make gpu-test`. The sm_75 paths (m16n8k8, copies
without cp.async) are forced with -DHGEMM_SM75, so the emulator (sm_80) runs them too. -DHGEMM_BF16 builds
kernels 2 and 3 for bf16 inputs (uint16 bits on the host: NumPy has no bfloat16).
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.check import bf16_to_float, float_to_bf16
from cudl.compile import KERNELS_DIR, nvrtc_compile, resolve

GUARD = 64  # NaN elements after C
# relative error by norm: fp32 accumulation of exact fp16 products stays near 1e-6; 1e-3 is the fp16 range
TOL = 1e-3
# bf16 inputs: the reference multiplies the same bf16-rounded values, and bf16 products (8-bit significands)
# are exact in fp32, so only the fp32 accumulation differs (~1e-6). 1e-4 leaves room for the hardware's
# summation order and stays well below bf16's unit roundoff (2^-8 ~ 4e-3): a result rounded to bf16 anywhere
# on the way fails.
TOL_BF16 = 1e-4

# kernel: (threads per block, (rows, cols) of C per block, K step), as in each file's header
LAUNCH = {
    "hgemm_1_wmma": (128, (64, 64), 32),
    "hgemm_2_mma_ldmatrix": (256, (128, 128), 32),
    "hgemm_3_cp_async": (256, (128, 128), 32),
}
SHAPES = {  # (M, N, K): one block, and several blocks in both directions with several K steps
    "hgemm_1_wmma": [(64, 64, 64), (128, 192, 96)],
    "hgemm_2_mma_ldmatrix": [(128, 128, 32), (256, 128, 96)],
    "hgemm_3_cp_async": [(128, 128, 32), (128, 256, 160)],
}
CASES = [(k, s) for k, shapes in SHAPES.items() for s in shapes]


# dynamic shared memory of a launch (kernel 3 keeps its ring there): the chapter's own launcher module
shared_bytes = cudl.kernels_module("11-tensor-cores/hgemm.py").shared_bytes


def operand(shape: tuple[int, int], bf16: bool) -> tuple[np.ndarray, np.ndarray]:
    """Fresh standard-normal fp16 values, or bf16 as uint16 bits; and their exact float64 values."""
    x = np.random.default_rng().standard_normal(shape)
    if bf16:
        bits = float_to_bf16(x.astype(np.float32))
        return bits, bf16_to_float(bits).astype(np.float64)
    h = x.astype(np.float16)
    return h, h.astype(np.float64)


def relative_error(name: str, M: int, N: int, K: int, options=(), k_arg: int | None = None,
                   source: str | None = None, bn: int | None = None, launch=None,
                   bf16: bool = False) -> float:
    """Launch `name` (from its file, or `source`) on fresh M x K and K x N inputs (fp16, or bf16 with
    `bf16`; passing `k_arg` as K if given); the relative error of C by norm (NaN if C holds NaN)."""
    threads, (bm, bn0), bk = launch or LAUNCH[name]
    bn = bn or bn0
    assert M % bm == 0 and N % bn == 0 and K % bk == 0
    kernel = cudl.load(source or f"11-tensor-cores/{name}.cu", name, options=options)
    a, a64 = operand((M, K), bf16)
    b, b64 = operand((K, N), bf16)
    c_buf = cudl.poisoned(M * N + GUARD)
    kernel((N // bn, M // bm), threads, (M, N, k_arg or K, cudl.xp.asarray(a), cudl.xp.asarray(b), c_buf),
           shared_mem=shared_bytes(name, options))
    cudl.sync()
    out = cudl.to_numpy(c_buf)
    got = out[: M * N].reshape(M, N).astype(np.float64)
    ref = a64 @ b64
    assert np.isnan(out[M * N:]).all(), f"{name} wrote past the end of C"
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def run_and_check(name: str, M: int, N: int, K: int, options=()) -> None:
    err = relative_error(name, M, N, K, options)
    assert not np.isnan(err), f"{name} {M}x{N}x{K}: C holds NaN (unwritten elements or unloaded tiles)"
    assert err < TOL, f"{name} {M}x{N}x{K}: relative error {err:.2e}"


@pytest.mark.parametrize("name,shape", CASES, ids=[f"{k}-{'x'.join(map(str, s))}" for k, s in CASES])
def test_hgemm(name, shape):
    run_and_check(name, *shape)


def test_hgemm_1_wmma_128_tile():
    """The WMMA kernel with a 128 x 128 tile of 8 warps (64 x 32 each)."""
    opts = ("-DBM=128", "-DBN=128", "-DWARPS_N=4")
    err = relative_error("hgemm_1_wmma", 128, 256, 64, opts, launch=(256, (128, 128), 32))
    assert err < TOL, f"relative error {err:.2e}"


@pytest.mark.parametrize("opts,threads,tile", [
    (("-DDOUBLE_BUFFER",), 128, (64, 64)),
    (("-DDOUBLE_BUFFER", "-DBM=128", "-DBN=128", "-DWARPS_N=4"), 256, (128, 128)),
    (("-DBM=128", "-DBN=256", "-DWARPS_N=4"), 256, (128, 256)),
    (("-DDOUBLE_BUFFER", "-DBM=128", "-DBN=128", "-DWARPS_N=2"), 128, (128, 128)),
    (("-DBK=64", "-DBM=128", "-DBN=128", "-DWARPS_N=2"), 128, (128, 128)),
    (("-DBK=64", "-DDOUBLE_BUFFER"), 128, (64, 64))])
def test_hgemm_1_wmma_variants(opts, threads, tile):
    """The WMMA variants of the GPU sweep: double-buffered tiles (one barrier per step), warp tiles
    of 64 x 64 (8 warps on 128 x 256, 4 on 128 x 128), and K steps of 64."""
    bk = 64 if "-DBK=64" in opts else 32
    err = relative_error("hgemm_1_wmma", 256, 512, 3 * bk, opts, bn=tile[1], launch=(threads, tile, bk))
    assert err < TOL, f"{opts}: relative error {err:.2e}"


def test_hgemm_3_k64_step():
    """Kernel 3 with a 64-wide K step (128-byte rows of A, swizzled by c ^ (r % 8))."""
    opts = ("-DBK=64", "-DSTAGES=2")
    err = relative_error("hgemm_3_cp_async", 128, 256, 320, opts, launch=(256, (128, 128), 64))
    assert err < TOL, f"relative error {err:.2e}"


@pytest.mark.parametrize("bn,stages", [(256, 2), (128, 4)])
def test_hgemm_3_wide_tile_deeper_ring(bn, stages):
    """Kernel 3 as tuned on a GPU: a 128 x 256 tile (warp tile 64 x 64) or a deeper ring (the emulator
    mimics a T4's 64 KiB of shared memory per block, so not both at once here)."""
    opts = (f"-DBN={bn}", f"-DSTAGES={stages}")
    err = relative_error("hgemm_3_cp_async", 128, 512, 224, opts, bn=bn)
    assert err < TOL, f"BN={bn} STAGES={stages}: relative error {err:.2e}"


# Kernel 3 with its fragments double-buffered in registers (FRAG_DBUF), alone and with the other
# options of the GPU sweep: (options, (M, N, K), BN). K = 32 is a single K step (the ring never fills);
# GROUP_M=2 on 5 tile rows leaves a short last band.
FRAG_DBUF_CASES = [
    (("-DFRAG_DBUF",), (128, 256, 160), 128),
    (("-DFRAG_DBUF", "-DSTAGES=4"), (128, 128, 32), 128),
    (("-DFRAG_DBUF", "-DSTAGES=2"), (256, 128, 96), 128),
    (("-DFRAG_DBUF", "-DBK=64", "-DSTAGES=2"), (128, 256, 192), 128),
    (("-DFRAG_DBUF", "-DBN=256", "-DSTAGES=2"), (128, 512, 96), 256),
    (("-DFRAG_DBUF", "-DGROUP_M=2"), (640, 384, 64), 128),
    (("-DGROUP_M=2",), (640, 384, 64), 128),
    (("-DFRAG_DBUF", "-DMIN_BLOCKS=2"), (128, 256, 96), 128),
    (("-DFRAG_DBUF", "-DHGEMM_SM75"), (128, 256, 96), 128),
]


@pytest.mark.parametrize("opts,shape,bn", FRAG_DBUF_CASES,
                         ids=[" ".join(o[2:] for o in c[0]) for c in FRAG_DBUF_CASES])
def test_hgemm_3_frag_dbuf(opts, shape, bn):
    err = relative_error("hgemm_3_cp_async", *shape, opts, bn=bn)
    assert err < TOL, f"{opts} {shape}: relative error {err:.2e}"


@pytest.mark.parametrize("opts,bk", [(("-DWARPS_N=2",), 32), (("-DWARPS_N=2", "-DFRAG_DBUF"), 32),
                                     (("-DWARPS_N=2", "-DFRAG_DBUF", "-DBK=64", "-DSTAGES=2"), 64)])
def test_hgemm_3_four_warps(opts, bk):
    """Kernel 3 with 4 warps of 64 x 64 on a 128 x 128 tile (a block of 128 threads)."""
    err = relative_error("hgemm_3_cp_async", 256, 256, 3 * bk, opts, launch=(128, (128, 128), bk))
    assert err < TOL, f"{opts}: relative error {err:.2e}"


def test_hgemm_3_frag_dbuf_bf16():
    err = relative_error("hgemm_3_cp_async", 128, 256, 96, (*BF16, "-DFRAG_DBUF"), bf16=True)
    assert err < TOL_BF16, f"relative error {err:.2e}"


@pytest.mark.parametrize("name", ["hgemm_2_mma_ldmatrix", "hgemm_3_cp_async"])
def test_hgemm_sm75_path(name):
    run_and_check(name, *SHAPES[name][1], options=("-DHGEMM_SM75",))


BF16 = ("-DHGEMM_BF16",)


@pytest.mark.parametrize("name,shape", [(k, s) for k, s in CASES if k != "hgemm_1_wmma"],
                         ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_hgemm_bf16(name, shape):
    err = relative_error(name, *shape, options=BF16, bf16=True)
    assert err < TOL_BF16, f"{name} bf16 {shape}: relative error {err:.2e}"


def test_hgemm_3_bf16_wide_tile():
    opts = (*BF16, "-DBN=256", "-DSTAGES=2")
    err = relative_error("hgemm_3_cp_async", 128, 512, 160, opts, bn=256, bf16=True)
    assert err < TOL_BF16, f"relative error {err:.2e}"


def test_hgemm_bf16_check_can_fail():
    """bf16 bits multiplied by the fp16 mma (the switch forgotten at the mma) are far outside the tolerance."""
    src = (KERNELS_DIR / "11-tensor-cores/hgemm_2_mma_ldmatrix.cu").read_text()
    wrong = src.replace("mma_16x8x16_in(acc", "mma_16x8x16(acc")
    assert wrong != src
    err = relative_error("hgemm_2_mma_ldmatrix", 128, 128, 64, BF16, source=wrong, bf16=True)
    assert not err < 10 * TOL_BF16


@pytest.mark.parametrize("arch,options", [("sm_75", BF16), ("sm_90", (*BF16, "-DHGEMM_SM75"))])
def test_hgemm_bf16_needs_the_sm80_path(arch, options):
    """NVRTC refuses the bf16 switch where the sm_75 path (which has no bf16 mma) would be compiled."""
    pytest.importorskip("cuda.bindings")
    for name in ("hgemm_2_mma_ldmatrix", "hgemm_3_cp_async"):
        src, shown = resolve(f"11-tensor-cores/{name}.cu")
        with pytest.raises(cudl.CompileError, match="HGEMM_BF16"):
            nvrtc_compile(src, shown, arch, options)


def test_wrong_result_is_caught():
    """The check can fail: a launch whose K loop stops one step early (K = 64 passed for K = 96) is far
    outside the tolerance."""
    assert relative_error("hgemm_2_mma_ldmatrix", 128, 128, 96, k_arg=64) > 10 * TOL


# Plausible mistakes, made by editing one line of a kernel file: the check must reject each.
MUTANTS = {
    "wmma-b-col-major": ("hgemm_1_wmma", "__half, wmma::row_major> b[FN]", "__half, wmma::col_major> b[FN]"),
    "a-fragment-halves-swapped": ("hgemm_2_mma_ldmatrix", "k = kk + (lane / 16) * 8;",
                                  "k = kk + (1 - lane / 16) * 8;"),
    "b-registers-swapped": ("hgemm_2_mma_ldmatrix", ': "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]),',
                            ': "=r"(b[j][0]), "=r"(b[j + 1][0]), "=r"(b[j][1]),'),
    "unswizzled-store": ("hgemm_2_mma_ldmatrix", "&As[a_off(r, k)]) =", "&As[r * BK + k]) ="),
    "no-wait-group": ("hgemm_3_cp_async", "        wait_oldest();    //", "        //"),
    "wait-group-too-loose": ("hgemm_3_cp_async", "cp_async_wait<STAGES - 2>", "cp_async_wait<STAGES - 1>"),
    "no-barrier-after-stores": ("hgemm_2_mma_ldmatrix", "        }\n        __syncthreads();\n",
                                "        }\n"),
    "no-barrier-before-overwrite": ("hgemm_2_mma_ldmatrix", "        __syncthreads();  // before", "//"),
    "no-barrier-sm75-path": ("hgemm_3_cp_async", "        __syncthreads();  // everyone", "        //"),
    # the FRAG_DBUF main loop: the next slice's fragments over the ones being multiplied, no wait
    # for the next step's copies, no barrier before reading them (on the sm_75 path: the race check)
    "frag-dbuf-same-buffer": ("hgemm_3_cp_async", "fragments(step % STAGES, kk + 1, a[(kk + 1) % 2]",
                              "fragments(step % STAGES, kk + 1, a[kk % 2]"),
    "frag-dbuf-no-wait": ("hgemm_3_cp_async", "                wait_oldest();\n", "\n"),
    "frag-dbuf-no-barrier": ("hgemm_3_cp_async", "                __syncthreads();\n", "\n"),
}
# right by luck of order on the emulator: its race check must stop them. The race check does not see the
# writes of cp.async (they land inside wait_group), so kernel 3's missing barrier is caught on its sm_75 path.
RACES = {"no-barrier-after-stores", "no-barrier-before-overwrite", "no-barrier-sm75-path",
         "frag-dbuf-no-barrier"}
LATE_COPY = {"no-wait-group", "frag-dbuf-no-wait"}  # cp.async data used before its wait
OPTIONS = {"no-barrier-sm75-path": ("-DHGEMM_SM75",), "frag-dbuf-same-buffer": ("-DFRAG_DBUF",),
           "frag-dbuf-no-wait": ("-DFRAG_DBUF",), "frag-dbuf-no-barrier": ("-DFRAG_DBUF", "-DHGEMM_SM75")}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_is_rejected(mutant, mutated_kernel):
    name, old, new = MUTANTS[mutant]
    source = mutated_kernel("11-tensor-cores", name, old, new, race=mutant in RACES,
                            late_copy=mutant in LATE_COPY)
    M, N, K = SHAPES[name][1]
    try:
        err = relative_error(name, M, N, K, OPTIONS.get(mutant, ()), source=source)
    except cudl.KernelFault:  # e.g. the race check stops a launch without its barrier
        return
    assert not err < TOL, f"mutant {mutant} passes (relative error {err:.2e})"


UNSWIZZLE = [("return r * BK + ((((k >> 3) ^ (r >> 1)) & 3) << 3) + (k & 7);", "return r * BK + k;"),
             ("return k * BN + ((((n >> 3) ^ k) & 7) | ((n >> 3) & ~7)) * 8 + (n & 7);",
              "return k * BN + n;")]


@pytest.mark.parametrize("name,swizzled,options", [
    ("hgemm_2_mma_ldmatrix", True, ()), ("hgemm_3_cp_async", True, ()),
    ("hgemm_3_cp_async", True, ("-DBK=64", "-DSTAGES=2")), ("hgemm_2_mma_ldmatrix", False, ())])
def test_ldmatrix_bank_conflicts(name, swizzled, options):
    """The XOR swizzle makes every ldmatrix conflict-free (counted by the emulator's counters, one wavefront
    per request); the same kernel with plain row-major tiles is still right but has conflicts."""
    from cudl.compile import KERNELS_DIR

    src = (KERNELS_DIR / "11-tensor-cores" / f"{name}.cu").read_text()
    if not swizzled:
        for old, new in UNSWIZZLE:
            assert src.count(old) == 1, f"{name}.cu: {old}"
            src = src.replace(old, new)
    K = 64 if "-DBK=64" in options else 32
    a = np.ones((128, K), np.float16)
    b = np.ones((K, 128), np.float16)
    c = cudl.counters(cudl.load(src, name, options=options), (1, 1), LAUNCH[name][0],
                      (128, 128, K, a, b, cudl.poisoned(128 * 128)), shared_mem=shared_bytes(name, options))
    ways = c.shared_ways("load")
    # plain tiles: A rows 64 bytes apart (4-way per 8-row phase), B rows 256 bytes apart (8-way); 4 A and
    # 2 B ldmatrix.x4 per warp and k16 step: (4 x 16 + 2 x 32) / (6 x 4) wavefronts per ideal one
    expected = 1.0 if swizzled else (4 * 16 + 2 * 32) / 24
    assert ways == pytest.approx(expected), f"{name} swizzled={swizzled}: {ways}-way loads"


@pytest.mark.parametrize("kernel,threads,options", [
    ("hgemm_4_wgmma", 256, ()), ("hgemm_4_wgmma", 256, ("-DIN_FLIGHT=1", "-DGROUP_M=8")),
    ("hgemm_5_wgmma_tma", 384, ()), ("hgemm_5_wgmma_tma", 384, ("-DGROUP_M=8", "-DSETMAXNREG")),
    ("hgemm_5_wgmma_tma", 384, ("-DPERSISTENT", "-DGROUP_M=8"))])
def test_wgmma_kernels_on_hopper(kernel, threads, options, hopper):
    """Kernels 4 and 5 (wgmma, TMA: sm_90a only) and their tuning options against float64, on an sm_90
    GPU under `make gpu-test`."""
    from cudl.tma import tensor_map_2d

    k = cudl.load("11-tensor-cores/hgemm_4_wgmma.cu", kernel, options=["-arch=sm_90a", *options])
    smem = 4 * (128 * 64 + 64 * 256) * 2 + 1024 + 16 * 4
    for M, N, K in ((128, 256, 64), (384, 768, 4096), (2560, 4096, 512)):
        rng = np.random.default_rng()
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((K, N)).astype(np.float16)
        A, B, C = cudl.xp.asarray(a), cudl.xp.asarray(b), cudl.poisoned((M, N))
        args = (M, N, K, tensor_map_2d(A, (128, 64)), tensor_map_2d(B, (64, 64)), C) \
            if kernel == "hgemm_5_wgmma_tma" else (M, N, K, A, B, C)
        grid = (N // 256, M // 128)
        if "-DPERSISTENT" in options:  # one block per SM (at most), looping over the tiles
            grid = (min(cudl.device_info()["sms"], grid[0] * grid[1]),)
        k(grid, threads, args, shared_mem=smem)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        got = cudl.to_numpy(C).astype(np.float64)
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL, (kernel, M, N, K)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_wgmma_file_compiles_for_every_stage_count(stages):
    """Kernels 4 and 5 share a file: a kernel-5 build with 2 stages must not trip kernel 4's
    IN_FLIGHT = 2 (which needs 3 stages); the chapter sweeps kernel 5 over 2-4 stages."""
    from cudl.compile import nvrtc_compile
    from cudl.nbtools import KERNELS_DIR

    src = (KERNELS_DIR / "11-tensor-cores/hgemm_4_wgmma.cu").read_text()
    nvrtc_compile(src, "11-tensor-cores/hgemm_4_wgmma.cu", "sm_90a", (f"-DSTAGES={stages}",))
