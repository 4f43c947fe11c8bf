"""cudl.occupancy without a GPU: values worked out by hand with the CUDA occupancy calculator's rules.

The same rules are in the CUDA toolkit's `cuda_occupancy.h`; 40,000 random cases of this calculator were
checked against that header (compiled with g++) while it was written, and the GPU script of chapter 2
compares it with the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor for every kernel of the chapter.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cudl import on_gpu
from cudl.occupancy import LIMITS, Occupancy, compare, format_table, limits, limits_table, occupancy, of_kernel

# (regs/thread, shared bytes/block, threads/block, cc) -> (blocks/SM, warps/SM, limiters)
PINNED = [
    # 32 regs x 32 lanes = 1024 regs/warp; a quadrant (16384 regs) holds 16 warps, the SM 64 = 8 blocks of 8
    # warps, exactly the 64-warp limit: both resources bind.
    ((32, 0, 256, "8.0"), (8, 64, ("warps", "registers"))),
    # 40 regs -> 1280/warp; 16384 // 1280 = 12 warps per quadrant, 48 per SM = 6 blocks of 8 warps.
    ((40, 0, 256, "9.0"), (6, 48, ("registers",))),
    # Quadrants count: 48 warps / 3 per block = 16 blocks, although 65536 / (1280 x 3) = 17.07.
    ((40, 0, 96, "9.0"), (16, 48, ("registers",))),
    # Allocation unit: 33 x 32 = 1056 regs/warp is rounded up to 1280, so 33 regs costs as much as 40.
    ((33, 0, 256, "9.0"), (6, 48, ("registers",))),
    # Per-block limit: 65 regs -> 2304/warp x 32 warps = 73728 > 65536: the launch cannot happen at all.
    ((65, 0, 1024, "9.0"), (0, 0, ("registers",))),
    ((64, 0, 1024, "9.0"), (1, 32, ("registers",))),
    ((255, 0, 256, "9.0"), (1, 8, ("registers",))),
    # Turing: 32 warps per SM; 128 regs -> 4096/warp, 4 warps per quadrant, 16 per SM = 2 blocks of 8 warps.
    ((128, 0, 256, "7.5"), (2, 16, ("registers",))),
    ((16, 0, 128, "7.5"), (8, 32, ("warps",))),
    # Turing shared memory: 10000 B rounds up to 10240 (unit 256 B, no reserve); 65536 // 10240 = 6 blocks.
    ((32, 10000, 128, "7.5"), (6, 24, ("shared memory",))),
    # Hopper: 48 KiB + 1 KiB reserved = 50176 B per block; 233472 // 50176 = 4 blocks.
    ((16, 48 * 1024, 256, "9.0"), (4, 32, ("shared memory",))),
    # sm_80+: 1000 B + 1024 reserved = 2024, rounded up to 2048 (unit 128 B); 167936 // 2048 = 82 blocks,
    # so tiny blocks hit the 32-blocks-per-SM limit first.
    ((16, 1000, 32, "8.0"), (32, 32, ("blocks",))),
    ((16, 100 * 1024, 128, "8.0"), (1, 4, ("shared memory",))),
    # More than one block may use (227 KiB on Hopper): no block fits.
    ((16, 228 * 1024, 128, "9.0"), (0, 0, ("shared memory",))),
    # Blocks per SM: 16 on sm_86, 24 on sm_89, so one-warp blocks leave most warp slots empty.
    ((8, 0, 32, "8.6"), (16, 16, ("blocks",))),
    ((8, 0, 32, "8.9"), (24, 24, ("blocks",))),
    # 100 threads are 4 warps (the last one partly empty): 64 // 4 = 16 blocks.
    ((32, 0, 100, "9.0"), (16, 64, ("warps", "registers"))),
    ((0, 0, 64, "9.0"), (32, 64, ("warps", "blocks"))),
]


@pytest.mark.parametrize("args,expected", PINNED, ids=[str(a) for a, _ in PINNED])
def test_pinned_values(args, expected):
    regs, smem, threads, cc = args
    o = occupancy(regs, smem, threads, device=cc)
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiters) == expected
    assert o.max_warps_per_sm == LIMITS[cc].max_warps_per_sm
    assert o.fraction == o.warps_per_sm / o.max_warps_per_sm


def test_allocations_are_reported():
    o = occupancy(33, 1000, 256, device="9.0")
    assert o.regs_per_block == 1280 * 8  # 8 warps of 1056 registers rounded up to 1280
    assert o.smem_per_block == 2048  # 1000 + 1024 reserved, rounded up to 128 B
    assert occupancy(33, 1000, 256, device="7.5").smem_per_block == 1024  # no reserve, 256 B unit


def test_limits_per_compute_capability():
    assert [LIMITS[c].max_warps_per_sm for c in ("7.5", "8.0", "8.6", "8.9", "9.0")] == [32, 64, 48, 48, 64]
    assert [LIMITS[c].max_blocks_per_sm for c in ("7.5", "8.0", "8.6", "8.9", "9.0")] == [16, 32, 16, 24, 32]
    assert all(lim.regs_per_sm == 65536 and lim.reg_granularity == 256 for lim in LIMITS.values())
    assert LIMITS["9.0"].smem_per_sm == 228 * 1024 and LIMITS["9.0"].smem_reserved_per_block == 1024


@pytest.mark.parametrize("device,cc", [("8.6", "8.6"), ("sm_86", "8.6"), ("86", "8.6"), (8.6, "8.6"), (9, "9.0"),
                                       ("T4", "7.5"), ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA L4", "8.9"),
                                       (LIMITS["8.0"], "8.0")])
def test_device_names(device, cc):
    assert limits(device).cc == cc


def test_bad_inputs_say_why():
    with pytest.raises(ValueError, match="known"):
        limits("7.0")
    with pytest.raises(ValueError, match="unknown device"):
        limits("a toaster")
    with pytest.raises(ValueError, match="1 to 1024 threads"):
        occupancy(32, 0, 2048, device="9.0")
    with pytest.raises(ValueError, match="255 registers"):
        occupancy(300, 0, 128, device="9.0")
    if not on_gpu():
        with pytest.raises(ValueError, match="no GPU"):
            occupancy(32, 0, 128)


def test_more_registers_never_raise_occupancy():
    for cc in LIMITS:
        for threads in (64, 96, 256, 1024):
            blocks = [occupancy(r, 0, threads, device=cc).blocks_per_sm for r in range(0, 256)]
            assert all(a >= b for a, b in zip(blocks, blocks[1:])), (cc, threads)


def test_str_is_one_readable_line():
    s = str(occupancy(40, 0, 256, device="H100"))
    assert s.startswith("6 blocks x 256 threads = 48/64 warps per SM (75% occupancy) on sm_90")
    assert "limited by registers" in s
    assert str(occupancy(64, 0, 1024, device="9.0")).startswith("1 block x")


def test_of_kernel_and_compare_use_compiler_numbers():
    k = SimpleNamespace(name="fake", num_regs=40, shared_bytes=1000)
    assert of_kernel(k, 256, dynamic_smem=3000, device="9.0") == occupancy(40, 4000, 256, device="9.0")
    rows = compare([(k, 256), (k, 128, 3000)], device="9.0", show=False)
    assert [r["blocks"] for r in rows] == [6, 12] and all(r["cuda"] is None and r["agree"] for r in rows)
    text = format_table(rows)
    assert text.splitlines()[0].split()[:2] == ["kernel", "threads"] and "registers" in text
    with pytest.raises(ValueError, match="emulator"):
        of_kernel(SimpleNamespace(name="emu", num_regs=None, shared_bytes=None), 256, device="9.0")


def test_limits_table_lists_every_row():
    text = limits_table()
    assert all(cc in text.splitlines()[0] for cc in LIMITS) and "228" in text
    assert isinstance(occupancy(1, 0, 1, device="9.0"), Occupancy)


def test_cuda_api_reads_the_function_pointer(monkeypatch):
    """cuda_api accepts what cudl.load holds on a GPU (a CuPy Function) as well as a RawKernel (its .kernel)."""
    import sys
    from types import ModuleType

    import cudl.backend
    from cudl import occupancy as occ

    calls, opted = [], []
    fake = ModuleType("cupy")
    fake.cuda = SimpleNamespace(driver=SimpleNamespace(
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8,
        funcSetAttribute=lambda ptr, attr, value: opted.append((ptr, attr, value)),
        occupancyMaxActiveBlocksPerMultiprocessor=lambda ptr, threads, smem: calls.append((ptr, threads, smem)) or 7))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(cudl.backend, "require_gpu", lambda what: None)
    function = SimpleNamespace(ptr=1234)  # a CuPy Function has no max_dynamic_shared_size_bytes property
    assert occ.cuda_api(SimpleNamespace(_impl=function), 256) == 7
    raw_kernel = SimpleNamespace(kernel=SimpleNamespace(ptr=99))
    assert occ.cuda_api(SimpleNamespace(_impl=raw_kernel), 128, 64 * 1024) == 7
    assert opted == [(99, 8, 64 * 1024)]  # opted in through cuFuncSetAttribute, as a launch would
    assert calls == [(1234, 256, 0), (99, 128, 64 * 1024)]


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
def test_calculator_equals_the_cuda_api_on_this_gpu():
    import cudl

    k = cudl.load("02-execution-model/smem_banks.cu", "smem_read_stride")
    rows = compare([(k, t, d) for t in (32, 128, 256, 1024) for d in (0, 20000)], show=False)
    assert all(r["agree"] for r in rows), rows
