"""cudl.ceilings on a real GPU (`make gpu-test`): one ceiling per precision where the GPU has it, streams that
match the traffic, and percentages that stay at or under 100 (issue 23)."""

from __future__ import annotations

import pytest

import cudl

cupy = pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def measured():
    return cudl.ceilings(refresh=True)


def test_a_gemm_ceiling_per_precision_where_the_gpu_has_it(measured):
    print({k: v for k, v in measured.items() if k != "datasheet"})
    cc = tuple(int(x) for x in cudl.device_info()["cc"].split("."))
    expected = {"fp32", "fp16"}
    try:
        import torch  # noqa: F401

        expected |= {"int8"} if cc >= (7, 5) else set()
        expected |= {"tf32", "bf16"} if cc >= (8, 0) else set()
        expected |= {"fp8"} if cc >= (8, 9) else set()
    except ImportError:
        pass
    gemm = measured["gemm_tflops"]
    assert set(gemm) == expected and set(expected) <= set(measured["names"])
    assert gemm["fp16"] > 2 * gemm["fp32"]  # Tensor Cores
    if "fp8" in gemm:
        assert gemm["fp8"] > 1.3 * gemm["fp16"]
    sheet = cudl.datasheet(measured["gpu"])
    for p in ("fp32", "tf32", "fp16", "bf16"):
        if sheet and sheet.get(p) and p in gemm:
            assert gemm[p] < 1.05 * sheet[p], f"{p}: {gemm[p]:.0f} TFLOP/s above the datasheet's {sheet[p]}"


def test_streams_match_their_traffic(measured):
    copy, read = measured["copy_gbps"], measured["read_gbps"]
    sheet = cudl.datasheet(measured["gpu"])
    if sheet:
        assert 0.5 * sheet["bw"] < copy < 1.05 * sheet["bw"] and 0.5 * sheet["bw"] < read < 1.05 * sheet["bw"]
    # vector add's traffic (2 bytes read per byte written) lies between the two streams
    _, c = cudl.Timing("x", 1.0, 1.0, 1.0, 10, bytes=3e9, traffic=(2e9, 1e9)).ceiling()
    assert min(copy, read) <= c.value <= max(copy, read)


def test_library_and_own_kernels_stay_at_or_under_100(measured):
    """A 4096^3 fp16 GEMM against the fp16 ceiling: under 100, and never against the fp32 rate."""
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    t = cudl.bench(lambda: a @ a, flops=2 * 4096**3, compute="fp16", name="fp16 4096")
    pct, c = t.ceiling()
    print(t)
    assert c.key == "fp16" and 20 < pct <= 100
    x = cupy.zeros(1 << 28, dtype=cupy.float32)
    s = cudl.bench(lambda: x.sum(), bytes=x.nbytes, traffic="read", name="cupy sum")
    pct, c = s.ceiling()
    print(s)
    assert c.key == "read" and pct < 102  # a library reduction against the read stream: within noise of it
