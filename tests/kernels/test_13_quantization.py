"""Chapter 13 kernels against NumPy references: integer outputs bit-exact, GEMV/GEMM against float64.

Fresh random inputs every run, outputs poisoned (NaN, or for integers a value the kernel never writes, or two
runs with different sentinels), odd sizes that take the scalar fallbacks, and a guard zone after each output.
Runs on the CPU emulator by default (tests/conftest.py) and on a GPU under `make gpu-test`.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl.grade.ch13 import (
    dequantize_ref,
    expand_scale,
    pack_int4,
    quantize_int4_ref,
    quantize_int8_ref,
    quantize_uint8_zero_point_ref,
    unpack_int4,
)

D = "13-quantization"
GUARD = 64


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def rand(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


def out_buf(n: int, dtype, fill) -> object:
    return cudl.xp.full(n + GUARD, fill, dtype=dtype)


def take(buf, n: int, fill) -> np.ndarray:
    """The first n elements of an output buffer; the guard zone after them must be untouched."""
    a = cudl.to_numpy(buf)
    guard = a[n:]
    assert (np.isnan(guard) if np.isnan(fill) else guard == fill).all(), "wrote past the end"
    return a[:n]


# (rows, cols, group): per tensor (one row, one group), per channel, per group, odd sizes and short last groups
SHAPES = [(1, 1000, 1000), (7, 33, 33), (5, 256, 64), (3, 100, 32), (2, 130, 128), (1, 2, 2)]


def launch_quantize(name: str, rows: int, cols: int, group: int, args: tuple) -> None:
    warps = rows * cdiv(cols, group)
    cudl.load(f"{D}/quantize.cu", name)((cdiv(warps, 4),), (128,), (rows, cols, group, *args))
    cudl.sync()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_quantize_int8(shape):
    rows, cols, group = shape
    w = rand(rows, cols)
    w[0, 0] = 0.0  # an exact zero stays zero
    ref_q, ref_s = quantize_int8_ref(w, group)
    ng = ref_s.size
    q, s = out_buf(rows * cols, np.int8, -128), out_buf(ng, np.float32, np.nan)  # -128 is never written
    launch_quantize("quantize_int8", rows, cols, group, (cudl.xp.asarray(w), q, s))
    got_q, got_s = take(q, rows * cols, -128), take(s, ng, np.nan)
    np.testing.assert_array_equal(got_q.reshape(rows, cols), ref_q)
    np.testing.assert_array_equal(got_s, ref_s)
    # dequantize: bit-exact with the reference, and within half a step of w
    out = out_buf(rows * cols, np.float32, np.nan)
    cudl.load(f"{D}/quantize.cu", "dequantize_int8")(
        (cdiv(rows * cols, 256),), (256,), (rows, cols, group, cudl.xp.asarray(ref_q), cudl.xp.asarray(ref_s), out))
    cudl.sync()
    back = take(out, rows * cols, np.nan).reshape(rows, cols)
    np.testing.assert_array_equal(back, dequantize_ref(ref_q, ref_s, group))
    assert (np.abs(back - w) <= 0.5001 * expand_scale(ref_s, w.shape, group)).all()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_quantize_uint8_zero_point(shape):
    rows, cols, group = shape
    w = rand(rows, cols) + 0.7  # skewed: the zero point matters
    ref_q, ref_s, ref_z = quantize_uint8_zero_point_ref(w, group)
    ng = ref_s.size
    for fill in (0, 255):  # every byte value is a valid output: two sentinels catch a missed write
        q, s, z = out_buf(rows * cols, np.uint8, fill), out_buf(ng, np.float32, np.nan), out_buf(ng, np.uint8, fill)
        launch_quantize("quantize_uint8_zero_point", rows, cols, group, (cudl.xp.asarray(w), q, s, z))
        np.testing.assert_array_equal(take(q, rows * cols, fill).reshape(rows, cols), ref_q)
        np.testing.assert_array_equal(take(s, ng, np.nan), ref_s)
        np.testing.assert_array_equal(take(z, ng, fill), ref_z)
    out = out_buf(rows * cols, np.float32, np.nan)
    cudl.load(f"{D}/quantize.cu", "dequantize_uint8_zero_point")(
        (cdiv(rows * cols, 256),), (256,),
        (rows, cols, group, cudl.xp.asarray(ref_q), cudl.xp.asarray(ref_s), cudl.xp.asarray(ref_z), out))
    cudl.sync()
    back = take(out, rows * cols, np.nan).reshape(rows, cols)
    np.testing.assert_array_equal(back, dequantize_ref(ref_q, ref_s, group, ref_z))
    assert (np.abs(back - w) <= 0.5001 * expand_scale(ref_s, w.shape, group)).all()


INT4_SHAPES = [(1, 1000, 1000), (7, 34, 34), (5, 256, 64), (3, 100, 32), (2, 130, 128), (1, 2, 2)]


@pytest.mark.parametrize("shape", INT4_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_quantize_int4(shape):
    rows, cols, group = shape
    w = rand(rows, cols)
    ref_p, ref_s = quantize_int4_ref(w, group)
    n, ng = rows * cols // 2, ref_s.size
    for fill in (0, 255):
        p, s = out_buf(n, np.uint8, fill), out_buf(ng, np.float32, np.nan)
        launch_quantize("quantize_int4", rows, cols, group, (cudl.xp.asarray(w), p, s))
        np.testing.assert_array_equal(take(p, n, fill).reshape(rows, cols // 2), ref_p)
        np.testing.assert_array_equal(take(s, ng, np.nan), ref_s)
    out = out_buf(rows * cols, np.float32, np.nan)
    cudl.load(f"{D}/quantize.cu", "dequantize_int4")(
        (cdiv(n, 256),), (256,), (rows, cols, group, cudl.xp.asarray(ref_p), cudl.xp.asarray(ref_s), out))
    cudl.sync()
    back = take(out, rows * cols, np.nan).reshape(rows, cols)
    np.testing.assert_array_equal(back, dequantize_ref(unpack_int4(ref_p), ref_s, group))
    # absmax int4: the largest |w| of a group maps to +-7, so every w is within half a step
    assert (np.abs(back - w) <= 0.5001 * expand_scale(ref_s, w.shape, group)).all()


def test_pack_unpack_roundtrip():
    q = np.random.default_rng().integers(-8, 8, size=(3, 10))
    np.testing.assert_array_equal(unpack_int4(pack_int4(q)), q)


# ------------------------------------------------------------------------------ GEMV
# fp16 output of an fp32 sum: relative error by norm ~ 2^-11; a wrong group, nibble or row is O(1)
GEMV_TOL = 2e-3
# (N, K, group): the 16-byte paths (K multiple of 32), row counts that are not multiples of the rows per
# block, several groups per row, per-channel groups, and odd K for the scalar fallbacks
GEMV_SHAPES = [(37, 256, 64), (9, 1024, 128), (6, 4608, 128), (64, 512, 512), (5, 96, 32), (13, 100, 50), (3, 34, 34),
               (1, 1, 1)]


def gemv_launch(name: str, N: int, rows: int = 4, warps: int = 4, unroll: int = 4, ksplit: int = 1):
    """The kernel and its launch: `warps` per block, `ksplit` of them sharing each group of `rows` rows."""
    k = cudl.load(f"{D}/{name}.cu", name, options=(f"-DROWS={rows}", f"-DUNROLL={unroll}", f"-DKSPLIT={ksplit}"))
    return k, (cdiv(N * ksplit, rows * warps),), (32 * warps,)


def check_gemv(y, ref: np.ndarray, name: str) -> None:
    got = take(y, ref.size, np.nan).astype(np.float64)
    assert not np.isnan(got).any(), f"{name}: unwritten rows"
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err < GEMV_TOL, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("rows,unroll,ksplit", [(1, 4, 1), (2, 1, 1), (4, 2, 1), (2, 2, 2), (1, 3, 4)])
@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemv_fp16(shape, rows, unroll, ksplit):
    N, K, _ = shape
    w, x = rand(N, K).astype(np.float16), rand(K).astype(np.float16)
    y = out_buf(N, np.float16, np.nan)
    k, grid, block = gemv_launch("gemv_1_fp16", N, rows, unroll=unroll, ksplit=ksplit)
    k(grid, block, (N, K, cudl.xp.asarray(w), cudl.xp.asarray(x), y))
    cudl.sync()
    check_gemv(y, w.astype(np.float64) @ x.astype(np.float64), "gemv_1_fp16")


@pytest.mark.parametrize("rows,unroll,ksplit", [(1, 4, 1), (4, 2, 1), (2, 3, 2), (1, 1, 4)])
@pytest.mark.parametrize("shape", GEMV_SHAPES[:-1], ids=lambda s: "x".join(map(str, s)))
def test_gemv_w8a16(shape, rows, unroll, ksplit):
    N, K, group = shape
    w, x = rand(N, K), rand(K).astype(np.float16)
    q, s = quantize_int8_ref(w, group)
    y = out_buf(N, np.float16, np.nan)
    k, grid, block = gemv_launch("gemv_2_w8a16", N, rows, unroll=unroll, ksplit=ksplit)
    k(grid, block, (N, K, group, cudl.xp.asarray(q), cudl.xp.asarray(s), cudl.xp.asarray(x), y))
    cudl.sync()
    ref = dequantize_ref(q, s, group).astype(np.float64) @ x.astype(np.float64)
    check_gemv(y, ref, "gemv_2_w8a16")


@pytest.mark.parametrize("rows,unroll,ksplit", [(1, 4, 1), (4, 2, 1), (2, 3, 2), (1, 2, 4)])
@pytest.mark.parametrize("shape", GEMV_SHAPES[:-1], ids=lambda s: "x".join(map(str, s)))
def test_gemv_w4a16(shape, rows, unroll, ksplit):
    N, K, group = shape
    w, x = rand(N, K), rand(K).astype(np.float16)
    p, s = quantize_int4_ref(w, group)
    y = out_buf(N, np.float16, np.nan)
    k, grid, block = gemv_launch("gemv_3_w4a16", N, rows, unroll=unroll, ksplit=ksplit)
    k(grid, block, (N, K, group, cudl.xp.asarray(p), cudl.xp.asarray(s), cudl.xp.asarray(x), y))
    cudl.sync()
    ref = dequantize_ref(unpack_int4(p), s, group).astype(np.float64) @ x.astype(np.float64)
    check_gemv(y, ref, "gemv_3_w4a16")


@pytest.mark.parametrize("rows,unroll,warps,ksplit",
                         [(1, 4, 4, 1), (2, 2, 8, 1), (1, 3, 8, 2), (2, 2, 8, 4), (1, 1, 4, 1)])
@pytest.mark.parametrize("shape", [s for s in GEMV_SHAPES if s[1] % 32 == 0 and s[2] % 32 == 0],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["gemv_4_w4a16_smem", "gemv_5_w4a16_half2"])
def test_gemv_w4a16_smem(name, shape, rows, unroll, warps, ksplit):
    N, K, group = shape
    w, x = rand(N, K), rand(K).astype(np.float16)
    p, s = quantize_int4_ref(w, group)
    y = out_buf(N, np.float16, np.nan)
    k, grid, block = gemv_launch(name, N, rows, warps, unroll, ksplit)
    k(grid, block, (N, K, group, cudl.xp.asarray(p), cudl.xp.asarray(s), cudl.xp.asarray(x), y), shared_mem=4 * K)
    cudl.sync()
    ref = dequantize_ref(unpack_int4(p), s, group).astype(np.float64) @ x.astype(np.float64)
    check_gemv(y, ref, name)


def test_gemv_w4a16_every_nibble_position():
    """One nonzero weight per row at each of the 8 nibble positions of a word (and of the 4 words of a 16-byte
    chunk): a wrong mask, shift or magic constant for one position shows up as a wrong row."""
    N, K, group = 32, 64, 32
    q = np.zeros((N, K), np.int32)
    for n in range(N):
        q[n, n] = (n % 15) - 7 or 5  # column n: word n // 8, nibble n % 8
        q[n, 32 + (n * 7) % 32] = -8
    s = np.random.default_rng().uniform(0.5, 2, size=N * K // group).astype(np.float32)
    x = rand(K).astype(np.float16)
    y = out_buf(N, np.float16, np.nan)
    ref = dequantize_ref(q, s, group).astype(np.float64) @ x.astype(np.float64)
    for name in ("gemv_3_w4a16", "gemv_4_w4a16_smem", "gemv_5_w4a16_half2"):
        y.fill(np.nan)
        k, grid, block = gemv_launch(name, N, 4)
        k(grid, block, (N, K, group, cudl.xp.asarray(pack_int4(q)), cudl.xp.asarray(s), cudl.xp.asarray(x), y),
          shared_mem=0 if name == "gemv_3_w4a16" else 4 * K)
        cudl.sync()
        check_gemv(y, ref, f"{name}: nibble positions")


# gemv_5's options: the first step's loads before x is prepared (EARLY), x's loads batched (X_BATCH), weights
# loaded without L1 allocation or evict-first (LOAD); gemv_1 and gemv_2 with LOAD too
@pytest.mark.parametrize("options", [("-DEARLY=1",), ("-DEARLY=1", "-DUNROLL=3", "-DKSPLIT=2"), ("-DX_BATCH=3",),
                                     ("-DX_BATCH=4", "-DEARLY=1", "-DLOAD=1", "-DROWS=2"), ("-DLOAD=2",),
                                     ("-DGROUP_SIZE=G", "-DEARLY=1")],
                         ids=" ".join)
@pytest.mark.parametrize("shape", [s for s in GEMV_SHAPES if s[1] % 32 == 0 and s[2] % 32 == 0],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemv_w4a16_half2_options(shape, options):
    N, K, group = shape
    w, x = rand(N, K), rand(K).astype(np.float16)
    p, s = quantize_int4_ref(w, group)
    y = out_buf(N, np.float16, np.nan)
    options = tuple(v.replace("=G", f"={group}") for v in options)  # GROUP_SIZE: the shape's group
    o = dict(v[2:].split("=") for v in options)
    rows, ksplit, warps = int(o.get("ROWS", 1)), int(o.get("KSPLIT", 1)), 4
    k = cudl.load(f"{D}/gemv_5_w4a16_half2.cu", "gemv_5_w4a16_half2", options=options)
    k((cdiv(N * ksplit, rows * warps),), (32 * warps,),
      (N, K, group, cudl.xp.asarray(p), cudl.xp.asarray(s), cudl.xp.asarray(x), y), shared_mem=2 * K)
    cudl.sync()
    ref = dequantize_ref(unpack_int4(p), s, group).astype(np.float64) @ x.astype(np.float64)
    check_gemv(y, ref, f"gemv_5 {options}")


@pytest.mark.parametrize("load", [1, 2])
@pytest.mark.parametrize("shape", GEMV_SHAPES[:4], ids=lambda s: "x".join(map(str, s)))
def test_gemv_load_options(shape, load):
    """LOAD for gemv_1 and gemv_2; gemv_2 also with its group fixed at compile time (GROUP_SIZE)."""
    N, K, group = shape
    w, x = rand(N, K), rand(K).astype(np.float16)
    q, s = quantize_int8_ref(w, group)
    w16 = w.astype(np.float16)
    for name, ops, ref in (("gemv_1_fp16", (cudl.xp.asarray(w16),), w16.astype(np.float64) @ x.astype(np.float64)),
                           ("gemv_2_w8a16", (group, cudl.xp.asarray(q), cudl.xp.asarray(s)),
                            dequantize_ref(q, s, group).astype(np.float64) @ x.astype(np.float64))):
        y = out_buf(N, np.float16, np.nan)
        fixed = (f"-DGROUP_SIZE={group}",) if name == "gemv_2_w8a16" and load == 2 else ()
        k = cudl.load(f"{D}/{name}.cu", name, options=(f"-DLOAD={load}", "-DKSPLIT=2", *fixed))
        k((cdiv(N * 2, 4),), (128,), (N, K, *ops, cudl.xp.asarray(x), y))
        cudl.sync()
        check_gemv(y, ref, f"{name} LOAD={load}")


@pytest.mark.parametrize("in_flight", [4, 8])
@pytest.mark.parametrize("where", [2, 10, 21])
def test_read_bytes_reads_every_chunk(in_flight, where):
    """read_bytes (the ceiling of the GEMV timings) with one thread: the XOR of all it read equals the constant
    exactly when the one nonzero word sits in a chunk it reads, in the IN_FLIGHT loop or in the tail."""
    n = 22
    buf = np.zeros(4 * n, np.uint32)
    buf[4 * where + 1] = 0x9E3779B9
    sink = cudl.xp.full(1, -1, dtype=np.int32)
    k = cudl.load(f"{D}/read_bytes.cu", "read_bytes", options=(f"-DIN_FLIGHT={in_flight}",))
    k((1,), (1,), (cudl.xp.asarray(buf), n, sink))
    cudl.sync()
    assert int(cudl.to_numpy(sink)[0]) == int(np.int32(np.uint32(0x9E3779B9).view(np.int32)))
    sink.fill(-1)
    k((1,), (1,), (cudl.xp.asarray(buf), where, sink))  # n = where: stops before that chunk
    cudl.sync()
    assert int(cudl.to_numpy(sink)[0]) == -1


def test_gemv_check_can_fail():
    """The GEMV check rejects a result from the wrong group size (scales of group 64 read as group 128)."""
    N, K = 9, 256
    w, x = rand(N, K), rand(K).astype(np.float16)
    q, s = quantize_int8_ref(w, 64)
    y = out_buf(N, np.float16, np.nan)
    k, grid, block = gemv_launch("gemv_2_w8a16", N)
    k(grid, block, (N, K, 128, cudl.xp.asarray(q), cudl.xp.asarray(s), cudl.xp.asarray(x), y))
    cudl.sync()
    ref = dequantize_ref(q, s, 64).astype(np.float64) @ x.astype(np.float64)
    with pytest.raises(AssertionError):
        check_gemv(y, ref, "wrong group")


# ------------------------------------------------------------------------------ int8 GEMM (bit-exact)

def rand_int8(*shape: int) -> np.ndarray:
    return np.random.default_rng().integers(-128, 128, size=shape).astype(np.int8)


def igemm(name: str, M: int, N: int, K: int, options=()) -> None:
    a, b = rand_int8(M, K), rand_int8(N, K)
    c = out_buf(M * N, np.int32, np.iinfo(np.int32).min)  # K * 128 * 128 < 2^31: never a result
    k = cudl.load(f"{D}/{name}.cu", name, options=options)
    if name == "igemm_1_dp4a":
        k((cdiv(N, 64), cdiv(M, 64)), (16, 16), (M, N, K, cudl.xp.asarray(a), cudl.xp.asarray(b), c))
    else:  # the block tile (128 x BN), warp tile (64 x WN), stages and shared memory of the options
        o = dict(v[2:].split("=") for v in options if "=" in v)
        bn, wn, stages = int(o.get("BN", 128)), int(o.get("WN", 32)), int(o.get("STAGES", 3))
        smem = stages * (128 + bn) * int(o.get("BK", 64))
        k((N // bn, M // 128), (64 * bn // wn,), (M, N, K, cudl.xp.asarray(a), cudl.xp.asarray(b), c),
          shared_mem=smem if smem > 48 * 1024 else 0)
    cudl.sync()
    got = take(c, M * N, np.iinfo(np.int32).min).reshape(M, N)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64).T)


@pytest.mark.parametrize("shape", [(1, 1, 4), (65, 70, 36), (64, 64, 32), (100, 3, 132)],
                         ids=lambda s: "x".join(map(str, s)))
def test_igemm_dp4a(shape):
    igemm("igemm_1_dp4a", *shape)


@pytest.mark.parametrize("shape", [(128, 128, 64), (256, 128, 192)], ids=lambda s: "x".join(map(str, s)))
def test_igemm_mma(shape):
    igemm("igemm_2_mma", *shape)


def test_igemm_mma_sm75_path():
    igemm("igemm_2_mma", 128, 256, 128, options=("-DIGEMM_SM75",))


def test_igemm_mma_two_stages():
    igemm("igemm_2_mma", 256, 128, 320, options=("-DSTAGES=2",))


@pytest.mark.parametrize("options", [("-DWN=64",), ("-DBN=256", "-DSTAGES=2"), ("-DBN=256", "-DWN=64", "-DSTAGES=2"),
                                     ("-DSTAGES=4",), ("-DWN=64", "-DSTAGES=4"), ("-DWN=64", "-DIGEMM_SM75"),
                                     ("-DBK=128", "-DSTAGES=2"), ("-DBK=128", "-DWN=64", "-DSTAGES=2"),
                                     ("-DBK=128", "-DSTAGES=2", "-DIGEMM_SM75"),
                                     ("-DBK=128", "-DSTAGES=2", "-DC_STREAM=1")],
                         ids=" ".join)
def test_igemm_mma_tiles(options):
    """Wider warp tiles, the 128 x 256 block tile, 128-byte K steps, and dynamic shared memory above 48 KiB (64 KiB with
    STAGES=4: the emulator's T4 allows no more; BN=256 with 3 stages, 72 KiB, runs only on the H100)."""
    igemm("igemm_2_mma", 256, 512, 384, options=options)


WGMMA_SHAPES = ((128, 256, 128), (384, 768, 4096), (2560, 4096, 512))  # one tile; rounds of the ring; > SMs
WGMMA_TUNINGS = [(), ("-DSTAGES=2",), ("-DPERSISTENT", "-DGROUP_M=8", "-DSETMAXNREG"), ("-DPERSISTENT", "-DGROUP_M=16")]


def wgmma_8bit(a, b, c, options) -> None:
    """C = A B^T through chapter 11's kernel 5 built for 8-bit inputs (options name the type): A (M x K)
    and B (N x K) device arrays of bytes."""
    from cudl.tma import tensor_map_2d

    k = cudl.load("11-tensor-cores/hgemm_4_wgmma.cu", "hgemm_5_wgmma_tma", options=("-arch=sm_90a", *options))
    stages = int(dict(v[2:].split("=") for v in options if "=" in v).get("STAGES", 4))
    (M, K), N = a.shape, b.shape[0]
    grid = (N // 256, M // 128)
    if "-DPERSISTENT" in options:
        grid = (min(cudl.device_info()["sms"], grid[0] * grid[1]),)
    k(grid, 384, (M, N, K, tensor_map_2d(a, (128, 128)), tensor_map_2d(b, (64, 128)), c),
      shared_mem=stages * (128 + 256) * 128 + 1024 + 16 * stages)
    cudl.sync()


@pytest.mark.parametrize("options", WGMMA_TUNINGS, ids=lambda o: " ".join(o) or "plain")
def test_igemm_wgmma_on_hopper(options, hopper):
    """hgemm_5_wgmma_tma with -DIGEMM_S8 (wgmma s8 -> s32, TMA; sm_90a only), bit-exact, on an sm_90 GPU
    under `make gpu-test`."""
    for M, N, K in WGMMA_SHAPES:
        a, b = rand_int8(M, K), rand_int8(N, K)
        c = out_buf(M * N, np.int32, np.iinfo(np.int32).min)
        wgmma_8bit(cudl.xp.asarray(a), cudl.xp.asarray(b), c, ("-DIGEMM_S8", *options))
        got = take(c, M * N, np.iinfo(np.int32).min).reshape(M, N)
        np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64).T, err_msg=f"{M}x{N}x{K}")


@pytest.mark.parametrize("options", WGMMA_TUNINGS[::2], ids=lambda o: " ".join(o) or "plain")
def test_fp8_wgmma_on_hopper(options, hopper):
    """The -DFP8_E4M3 build (wgmma e4m3 -> fp32) against float64 products of the same fp8 values, NaN-poisoned
    output. The fp8 Tensor Cores sum with fewer bits than fp32, hence the tolerance; a wrong layout is off by
    O(1)."""
    torch = pytest.importorskip("torch")
    for M, N, K in WGMMA_SHAPES:
        a, b = (torch.randn(n, K, device="cuda").to(torch.float8_e4m3fn) for n in (M, N))
        c = out_buf(M * N, np.float32, np.nan)
        wgmma_8bit(*(cudl.xp.from_dlpack(t.view(torch.uint8)) for t in (a, b)), c, ("-DFP8_E4M3", *options))
        got = take(c, M * N, np.nan).reshape(M, N)
        a64, b64 = (t.float().cpu().numpy().astype(np.float64) for t in (a, b))  # exact values
        ref = a64 @ b64.T
        assert np.isfinite(got).all(), f"{M}x{N}x{K}: NaN or Inf left in the output"
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < 1e-2, f"{M}x{N}x{K}: relative error {err:.1e}"


@pytest.mark.parametrize("kind", ["-DIGEMM_S8", "-DFP8_E4M3"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_igemm_wgmma_compiles(stages, kind):
    """The int8 and fp8 builds of chapter 11's wgmma file compile for sm_90a on any machine (NVRTC, no GPU):
    kernel 4 is left out of them, kernel 5 takes the 8-bit wgmma."""
    from cudl.compile import nvrtc_compile
    from cudl.nbtools import KERNELS_DIR

    src = (KERNELS_DIR / "11-tensor-cores/hgemm_4_wgmma.cu").read_text()
    nvrtc_compile(src, "11-tensor-cores/hgemm_4_wgmma.cu", "sm_90a", (kind, f"-DSTAGES={stages}"))


# ------------------------------------------------------------------------------ fp8 (GPU only)

@pytest.mark.skipif(not cudl.on_gpu(), reason="fp8 conversions need a GPU (cuda_fp8.h)")
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_matches_torch(fmt):
    torch = pytest.importorskip("torch")
    n = 2 * 12345
    x = cudl.randn(n) * 3
    fmax = 448.0 if fmt == "e4m3" else 57344.0
    amax = float(cudl.xp.abs(x).max())
    scale = np.float32(amax / fmax)
    q = cudl.xp.zeros(n // 2, dtype=np.uint16)
    cudl.load(f"{D}/fp8.cu", f"quantize_{fmt}")((cdiv(n // 2, 256),), (256,), (n, 1 / scale, x, q))
    dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
    ref = (torch.from_dlpack(x) * float(1 / scale)).to(dtype).view(torch.uint8)
    got = torch.from_dlpack(q).view(torch.uint8)
    assert torch.equal(got, ref)
    back = cudl.poisoned(n)
    cudl.load(f"{D}/fp8.cu", f"dequantize_{fmt}")((cdiv(n // 2, 256),), (256,), (n, scale, q, back))
    ref_back = ref.view(dtype).float() * float(scale)
    assert torch.equal(torch.from_dlpack(back), ref_back)
