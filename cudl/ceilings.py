"""What the GPU can do at best: measured copy bandwidth and cuBLAS GEMM rates, plus datasheet figures."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .backend import require_gpu

# Vendor datasheet figures (dense, no sparsity), for rooflines and for GPUs we have not measured.
# bw: DRAM GB/s; fp32: CUDA-core TFLOP/s; tf32/fp16/bf16: Tensor Core TFLOP/s with fp32 accumulate;
# l2_mb: L2 cache; sms: multiprocessors. Sources: NVIDIA T4, L4, A10, A100, H100, H200 and
# Ada (RTX 4090) datasheets / whitepapers. A10G figures are the A10's (AWS does not publish its own).
DATASHEET: dict[str, dict[str, float]] = {
    "T4": dict(bw=320, fp32=8.1, tf32=0, fp16=65, bf16=0, l2_mb=4, sms=40, cc=7.5),
    "L4": dict(bw=300, fp32=30.3, tf32=60, fp16=121, bf16=121, l2_mb=48, sms=58, cc=8.9),
    "A10G": dict(bw=600, fp32=31.2, tf32=62.5, fp16=125, bf16=125, l2_mb=6, sms=80, cc=8.6),
    "A100": dict(bw=2039, fp32=19.5, tf32=156, fp16=312, bf16=312, l2_mb=40, sms=108, cc=8.0),
    "H100": dict(bw=3350, fp32=67, tf32=495, fp16=989, bf16=989, l2_mb=50, sms=132, cc=9.0),
    "H200": dict(bw=4800, fp32=67, tf32=495, fp16=989, bf16=989, l2_mb=50, sms=132, cc=9.0),
    "RTX 4090": dict(bw=1008, fp32=82.6, tf32=82.6, fp16=165, bf16=165, l2_mb=72, sms=128, cc=8.9),
}


def datasheet(gpu_name: str) -> dict[str, float] | None:
    """Datasheet row for a device name such as 'NVIDIA H100 80GB HBM3' or 'Tesla T4'."""
    upper = gpu_name.upper()
    for key in sorted(DATASHEET, key=len, reverse=True):
        if key.upper() in upper:
            return DATASHEET[key]
    return None


def _cache_file(gpu: str) -> Path:
    root = Path(os.environ.get("CUDL_CACHE", Path.home() / ".cache" / "cudl"))
    return root / ("ceilings-" + "".join(c if c.isalnum() else "-" for c in gpu.lower()) + ".json")


def _measure() -> dict[str, Any]:
    import cupy

    from .bench import bench
    from .env import gpu_name

    n = 256 * 1024 * 1024  # 1 GiB of float32: far larger than any L2
    src = cupy.random.standard_normal(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    copy = bench(lambda: cupy.copyto(dst, src), bytes=2 * src.nbytes, name="copy")
    gemm: dict[str, float] = {}
    m = 8192
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        for label, dt in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            a = torch.randn(m, m, device="cuda", dtype=dt)
            b = torch.randn(m, m, device="cuda", dtype=dt)
            gemm[label] = bench(lambda: torch.mm(a, b), flops=2 * m**3).tflops  # type: ignore[assignment]
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(m, m, device="cuda")
        gemm["tf32"] = bench(lambda: torch.mm(a, a), flops=2 * m**3).tflops  # type: ignore[assignment]
        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:  # no PyTorch: cuBLAS through CuPy (fp32 with TF32 off is CuPy's default)
        for label, dt in (("fp32", cupy.float32), ("fp16", cupy.float16)):
            a = cupy.random.standard_normal((m, m)).astype(dt)
            gemm[label] = bench(lambda: a @ a, flops=2 * m**3).tflops  # type: ignore[assignment]
    return {"gpu": gpu_name(), "copy_gbps": copy.gbps, "gemm_tflops": gemm}


def ceilings(refresh: bool = False) -> dict[str, Any]:
    """Measured ceilings of this GPU (cached per GPU): copy GB/s and cuBLAS TFLOP/s by dtype, plus datasheet."""
    require_gpu("cudl.ceilings")
    from .env import gpu_name

    path = _cache_file(gpu_name())
    if path.is_file() and not refresh:
        result = json.loads(path.read_text())
    else:
        result = _measure()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
    result["datasheet"] = datasheet(result["gpu"])
    return result
