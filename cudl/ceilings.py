"""What the GPU can do at best: measured bandwidth and GEMM rates per precision, plus datasheet figures.

A percentage "of the ceiling" on the book's pages is always of the ceiling that matches the work:
* memory-bound: the measured stream with the kernel's traffic, a 1:1 copy (the default), a read-only
  stream (`traffic="read"`), or a mix of the two (`bytes=(read, written)`, see `memory_ceiling`);
* compute-bound: the measured GEMM rate of the kernel's own precision (fp32, tf32, fp16, bf16, fp8, int8).
  The reference is the library's GEMM (cuBLAS through PyTorch, 8192^3); where a kernel timed in the same
  run is faster (the book's int8 GEMM beats `torch._int_mm` on an H100), that kernel is the ceiling, named
  as such, so that a percentage never passes 100 because the library is slow (`compute_ceiling`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
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

# The precisions that have a FLOP-rate ceiling. A compute-bound timing names one (`compute=`), or
# cudl.record derives it from its `dtype` through DTYPE_PRECISION; there is no default.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
DTYPE_PRECISION = {
    "float32": "fp32", "fp32": "fp32", "tf32": "tf32",
    "float16": "fp16", "fp16": "fp16", "half": "fp16", "float16->float32": "fp16",
    "bfloat16": "bf16", "bf16": "bf16", "bfloat16->float32": "bf16",
    "fp8 e4m3": "fp8", "fp8 e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp8": "fp8",
    "int8": "int8", "int8->int32": "int8",
}
TRAFFIC = ("copy", "read")  # or (bytes read, bytes written)

# Bumped when the measured set changes, so that a cache written by an older cudl is measured again.
VERSION = 2


def precision_of(dtype: str) -> str | None:
    """The ceiling precision of a record's dtype ('float16->float32' -> 'fp16'); None if it has none ('w4')."""
    return DTYPE_PRECISION.get(str(dtype).strip().lower())


def datasheet(gpu_name: str) -> dict[str, float] | None:
    """Datasheet row for a device name such as 'NVIDIA H100 80GB HBM3' or 'Tesla T4'."""
    upper = gpu_name.upper()
    for key in sorted(DATASHEET, key=len, reverse=True):
        if key.upper() in upper:
            return DATASHEET[key]
    return None


@dataclass(frozen=True)
class Ceiling:
    """One ceiling: `key` is a precision or 'copy' / 'read' / 'mix', `value` is in `unit`."""

    key: str
    name: str
    value: float
    unit: str  # "TFLOP/s" or "GB/s"


def _cache_file(gpu: str) -> Path:
    root = Path(os.environ.get("CUDL_CACHE", Path.home() / ".cache" / "cudl"))
    return root / ("ceilings-" + "".join(c if c.isalnum() else "-" for c in gpu.lower()) + ".json")


# The streams, written like bench.py's flush kernel: 16-byte accesses in a grid-stride loop with four
# loads in flight per thread (as chapter 13's read_bytes.cu), 4 blocks of 512 threads per SM.
_STREAM_SRC = r"""
extern "C" __global__ void cudl_copy_stream(const int4* __restrict__ src, int4* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        int4 v[4];
        for (int j = 0; j < 4; j++) v[j] = src[i + j * stride];
        for (int j = 0; j < 4; j++) dst[i + j * stride] = v[j];
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

extern "C" __global__ void cudl_read_stream(const int4* __restrict__ p, long long n, int* sink) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    int acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        int4 v[4];
        for (int j = 0; j < 4; j++) v[j] = p[i + j * stride];
        for (int j = 0; j < 4; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
    if (acc == 0x7fffffff) *sink = acc;  // the buffer is zero: never taken, but the loads must stay
}
"""


def _measure_streams(bench: Any) -> dict[str, Any]:
    """1:1 copy (the faster of cupy.copyto and a 16-byte copy kernel) and a read-only stream, 1 GiB each."""
    import cupy

    nbytes = 1 << 30  # far larger than any L2
    src = cupy.zeros(nbytes // 4, dtype=cupy.int32)
    dst = cupy.empty_like(src)
    module = cupy.RawModule(code=_STREAM_SRC)
    copy_k, read_k = module.get_function("cudl_copy_stream"), module.get_function("cudl_read_stream")
    sink = cupy.zeros(1, dtype=cupy.int32)
    grid = (4 * cupy.cuda.Device().attributes["MultiProcessorCount"],)
    n16 = cupy.int64(nbytes // 16)
    copies = {"cupy.copyto": bench(lambda: cupy.copyto(dst, src), bytes=2 * nbytes, name="copy").gbps,
              "a 16-byte copy kernel": bench(lambda: copy_k(grid, (512,), (src, dst, n16)), bytes=2 * nbytes,
                                             name="copy kernel").gbps}
    by = max(copies, key=copies.__getitem__)
    read = bench(lambda: read_k(grid, (512,), (src, n16, sink)), bytes=nbytes, traffic="read", name="read").gbps
    return {"copy_gbps": copies[by], "read_gbps": read,
            "names": {"copy": f"1:1 copy ({by}, 1 GiB)", "read": "read-only stream (16-byte loads, 1 GiB)"}}


def _measure_gemms(bench: Any) -> tuple[dict[str, float], dict[str, str]]:
    """The library's GEMM rate per precision, 8192^3, each where this GPU and library support it."""
    m = 8192
    flops = 2 * m**3
    rates: dict[str, float] = {}
    names: dict[str, str] = {}
    try:
        import torch
    except ImportError:  # no PyTorch: cuBLAS through CuPy (fp32 with TF32 off is CuPy's default)
        import cupy

        for label, dt in (("fp32", cupy.float32), ("fp16", cupy.float16)):
            a = cupy.random.standard_normal((m, m)).astype(dt)
            rates[label] = bench(lambda: a @ a, flops=flops, compute=label).tflops
            names[label] = f"cuBLAS {label} GEMM (CuPy matmul, 8192³)"
        return rates, names

    cc = torch.cuda.get_device_capability()
    tf32_was = torch.backends.cuda.matmul.allow_tf32

    def randn(dt: Any) -> Any:
        return torch.randn(m, m, device="cuda").to(dt)

    def mm(label: str, how: str, fn: Any) -> None:
        try:
            rates[label] = bench(fn, flops=flops, compute=label).tflops
            names[label] = f"cuBLAS {label} GEMM ({how}, 8192³)"
        except (RuntimeError, AttributeError, TypeError):  # not on this GPU or in this PyTorch
            pass

    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        a32 = randn(torch.float32)
        mm("fp32", "torch.mm", lambda: torch.mm(a32, a32))
        a16 = randn(torch.float16)
        mm("fp16", "torch.mm", lambda: torch.mm(a16, a16))
        if cc >= (8, 0):  # TF32 and bf16 Tensor Cores: Ampere on
            b16 = randn(torch.bfloat16)
            mm("bf16", "torch.mm", lambda: torch.mm(b16, b16))
            torch.backends.cuda.matmul.allow_tf32 = True
            mm("tf32", "torch.mm", lambda: torch.mm(a32, a32))
            torch.backends.cuda.matmul.allow_tf32 = False
        if cc >= (7, 5):  # int8 Tensor Cores: Turing on; B column-major, as cuBLAS's int8 GEMM wants
            i8 = torch.randint(-128, 128, (m, m), device="cuda", dtype=torch.int8)
            mm("int8", "torch._int_mm", lambda: torch._int_mm(i8, i8.t()))
        if cc >= (8, 9):  # fp8 Tensor Cores: Ada and Hopper on; the faster of two output types
            f8, one = randn(torch.float8_e4m3fn), torch.tensor(1.0, device="cuda")
            best = 0.0
            for out in (torch.bfloat16, torch.float32):
                mm("fp8", "torch._scaled_mm e4m3", lambda out=out: torch._scaled_mm(
                    f8, f8.t(), scale_a=one, scale_b=one, out_dtype=out))
                best = max(best, rates.get("fp8", 0.0))
            if best:
                rates["fp8"] = best
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_was
    return rates, names


def _measure() -> dict[str, Any]:
    from .bench import bench
    from .env import gpu_name

    streams = _measure_streams(bench)
    gemm, gemm_names = _measure_gemms(bench)
    return {"gpu": gpu_name(), "version": VERSION, "copy_gbps": streams["copy_gbps"],
            "read_gbps": streams["read_gbps"], "gemm_tflops": gemm, "names": {**streams["names"], **gemm_names}}


def ceilings(refresh: bool = False) -> dict[str, Any]:
    """Measured ceilings of this GPU (cached per GPU): copy and read-only GB/s, GEMM TFLOP/s by precision.

    Keys: gpu, copy_gbps, read_gbps, gemm_tflops {precision: TFLOP/s}, names {key: what was measured},
    datasheet (the vendor's row, or None); in mimic mode they are the real GPU's, and `note` says so.
    """
    require_gpu("cudl.ceilings")
    from .env import gpu_name

    path = _cache_file(gpu_name())
    result = json.loads(path.read_text()) if path.is_file() and not refresh else None
    if not result or result.get("version") != VERSION:
        result = _measure()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
    result["datasheet"] = datasheet(result["gpu"])
    from .mimicry import active

    card = active()
    if card is not None:  # the ceilings of the GPU that runs the kernels, which is not the mimicked card
        result["note"] = f"measured on {result['gpu']}, not on the {card['name']} this run mimics"
    return result


# The fastest compute-bound rate cudl.record has stored in this process, per precision: (TFLOP/s, name).
_fastest: dict[str, tuple[float, str]] = {}


def note_rate(precision: str, tflops: float, name: str) -> None:
    """Remember a recorded rate, so that later timings of this precision are compared with it if it is faster."""
    if tflops > _fastest.get(precision, (0.0, ""))[0]:
        _fastest[precision] = (tflops, name)


def compute_ceiling(precision: str, tflops: float | None = None, name: str = "") -> Ceiling | None:
    """The ceiling of a `precision` timing: the library's measured GEMM rate, or the fastest rate of this
    precision timed in this run where that is faster (a recorded kernel, or this timing itself, given as
    `tflops` and `name`). None where the library's rate was not measured on this GPU."""
    if precision not in PRECISIONS:
        raise ValueError(f"compute={precision!r}: use one of {', '.join(PRECISIONS)}")
    c = ceilings()
    ref = c["gemm_tflops"].get(precision)
    if not ref:
        return None
    ref_name = c.get("names", {}).get(precision, f"cuBLAS {precision} GEMM")
    best = Ceiling(precision, ref_name, ref, "TFLOP/s")
    for rate, who in (_fastest.get(precision, (0.0, "")), (tflops or 0.0, name)):
        if rate > best.value:
            best = Ceiling(precision, f"{who or 'a kernel'}: the fastest {precision} of this run "
                                      f"({ref_name}: {ref:,.0f} TFLOP/s)", rate, "TFLOP/s")
    return best


def mix_gbps(read: float, written: float, copy_gbps: float, read_gbps: float) -> float:
    """The bandwidth ceiling of a stream that reads `read` bytes and writes `written` bytes.

    A linear cost model fitted to the two measured streams: a byte read costs 1/read_gbps, a byte
    written what the copy costs beyond its read, 2/copy_gbps - 1/read_gbps. It gives the read-only
    stream's rate at written = 0 and the copy's at read = written.
    """
    write_cost = 2 / copy_gbps - 1 / read_gbps
    if write_cost <= 0:  # a read stream slower than half the copy: the model fails, the copy is the bound
        return copy_gbps
    return (read + written) / (read / read_gbps + written * write_cost)


def memory_ceiling(traffic: str | tuple[float, float]) -> Ceiling | None:
    """The bandwidth ceiling that matches `traffic`: 'copy' (1:1), 'read', or (bytes read, bytes written)."""
    c = ceilings()
    names = c.get("names", {})
    if traffic == "copy":
        return Ceiling("copy", names.get("copy", "1:1 copy"), c["copy_gbps"], "GB/s")
    read_gbps = c.get("read_gbps")
    if not read_gbps:
        return None
    if traffic == "read":
        return Ceiling("read", names.get("read", "read-only stream"), read_gbps, "GB/s")
    read, written = traffic
    return Ceiling("mix", f"{read / written:.2g} bytes read per byte written (between the 1:1 copy and the "
                          "read-only stream)", mix_gbps(read, written, c["copy_gbps"], read_gbps), "GB/s")
