"""GPU check of two cudl helpers that chapters 6, 11 and 12 use, before those chapters are re-executed:
`cudl.bench_pair` (a kernel and its baseline timed in turn) and `cudl.profiling.kernels_launched` (the
GPU kernels one torch call ran). About 30 s on an H100.

    python3 tests/gpu/refac_helpers_check.py      # from the repository root, on a GPU with torch

1. bench_pair: chapter 11's call as the page makes it (kernel 1, WMMA 64 x 64, checked against a float64
   product first, against torch.mm(..., out_dtype=float32), 3 rounds, rep_ms=50), and two pairs whose
   ratio is known: an op against itself (~1) and one matmul against two of them (~2).
2. kernels_launched: a ResNet 3 x 3 convolution (chapter 6's probe: Winograd, FFT or GEMM kernels) and
   SDPA at chapter 12's size, full and causal (ch12.sdpa_backend), with warnings turned into failures
   (acc_events=True must keep PyTorch's dropped-events warning away).
3. The speed grader's measure() (now bench_pair) on recorded launches: a serial kernel against a
   parallel one must be SLOW, a kernel against itself not.
4. The unit tests of both helpers and the speed grader on the GPU (pytest).
Prints what the helpers return, then a table; the last line says PASS or lists the failures.
"""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's cudl, also where it is not installed
import cudl  # noqa: E402
import cudl.profiling  # noqa: E402
from cudl.grade import ch12  # noqa: E402

T0 = time.time()
failures: list[str] = []
rows: list[str] = []
print(cudl.gpu_name(), "torch", torch.__version__, flush=True)

# ------------------------------------------------------------------ 1. bench_pair
n = 4096
flops = 2 * n**3
a16 = torch.randn(n, n, device="cuda", dtype=torch.float16)
b16 = torch.randn(n, n, device="cuda", dtype=torch.float16)
a, b = cudl.xp.asarray(a16), cudl.xp.asarray(b16)


def cublas32():
    return torch.mm(a16, b16, out_dtype=torch.float32)


wmma = cudl.load("11-tensor-cores/hgemm_1_wmma.cu", "hgemm_1_wmma")
c = cudl.poisoned((n, n))


def run():
    wmma((n // 64, n // 64), (128,), (n, n, n, a, b, c))


run()
cudl.sync()
ref = a16[:256].double() @ b16.double()
err = float(torch.linalg.norm(torch.from_dlpack(c)[:256].double() - ref) / torch.linalg.norm(ref))
print(f"kernel 1 (WMMA 64x64) rel err vs float64 on 256 rows: {err:.1e}", flush=True)
if not err < 1e-3:
    failures.append(f"WMMA kernel wrong ({err:.1e}): its timings below mean nothing")

pairs = {
    "WMMA 64x64 vs cuBLAS fp32 out": (run, cublas32, dict(flops=flops, compute="fp16", rep_ms=50), None),
    "matmul vs itself": (lambda: torch.matmul(a16, b16), lambda: torch.matmul(a16, b16),
                         dict(flops=flops, compute="fp16", rep_ms=30), (0.9, 1.1)),
    "matmul vs two matmuls": (lambda: torch.matmul(a16, b16),
                              lambda: (torch.matmul(a16, b16), torch.matmul(b16, a16)),
                              dict(flops=flops, compute="fp16", rep_ms=30), (1.7, 2.3)),
}
for label, (fn, base, kw, expect) in pairs.items():
    p = cudl.bench_pair(fn, base, rounds=3, name=label.split(" vs ")[0],
                        baseline_name=label.split(" vs ")[1], **kw)
    print(f"{label}: {p}", flush=True)
    print(f"   rounds ms {[f'{x:.3f}' for x in p.rounds_ms]}, baseline {[f'{x:.3f}' for x in p.baseline_rounds_ms]}"
          f", runs {p.timing.runs}+{p.baseline.runs}, {p.timing.tflops:.0f} TFLOP/s", flush=True)
    rows.append(f"{label:34s} {p.timing.ms:7.3f} ms  baseline {p.baseline.ms:7.3f} ms  ratio {p.ratio:5.2f}")
    if len(p.rounds_ms) != 3 or not p.ratio > 0:
        failures.append(f"{label}: {len(p.rounds_ms)} rounds, ratio {p.ratio}")
    if expect and not expect[0] <= p.ratio <= expect[1]:
        failures.append(f"{label}: ratio {p.ratio:.2f}, expected {expect[0]}-{expect[1]}")

# ------------------------------------------------------------------ 2. kernels_launched


def probe(label: str, fn) -> list[str]:
    """kernels_launched(fn), with any warning it raises counted as a failure (acc_events=True must keep
    PyTorch's dropped-events warning away)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = cudl.profiling.kernels_launched(fn)
    for w in caught:
        failures.append(f"{label}: the profiler warned: {str(w.message)[:160]}")
    return names


x = torch.randn(32, 128, 28, 28, device="cuda")
w = torch.randn(128, 128, 3, 3, device="cuda")
conv = cudl.bench(lambda: F.conv2d(x, w, padding=1))  # warm, as in chapter 6's cell
names = probe("conv2d", lambda: F.conv2d(x, w, padding=1))
kind = ("Winograd" if any("winograd" in k.lower() for k in names) else
        "FFT" if any("fft" in k.lower() for k in names) else "implicit GEMM / GEMM")
print(f"conv2d 32x128x28x28, 3x3, {conv.ms:.3f} ms: {kind}; kernels_launched ->", flush=True)
for k in names:
    print(f"   {k[:110]}   [{cudl.profiling.kernel_name(k)[:40]}]")
rows.append(f"{'conv2d kernels':34s} {len(names)}: {kind}")
if not names or any(k.startswith(("aten::", "cuda", "Memset", "Memcpy")) for k in names):
    failures.append(f"conv2d kernels_launched: {names}")
mm = probe("matmul", lambda: torch.matmul(a16, b16))
print(f"torch.matmul fp16 -> {mm}", flush=True)
if len(mm) < 1:
    failures.append("torch.matmul launched no kernel?")
q, k_, v = (torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.float16) for _ in range(3))
for causal in (False, True):
    def sdpa(causal=causal):
        return F.scaled_dot_product_attention(q, k_, v, is_causal=causal)

    sdpa()
    names = probe(f"SDPA causal={causal}", sdpa)
    backend = ch12.sdpa_backend(sdpa)
    print(f"SDPA causal={causal}: ch12.sdpa_backend -> {backend}; kernels {names}", flush=True)
    rows.append(f"{f'SDPA causal={causal}':34s} {backend[:60]}")
    if not names or backend.startswith("math") or "no kernel seen" in backend:
        failures.append(f"SDPA causal={causal}: {backend} {names}")

# ------------------------------------------------------------------ 3. the speed grader's measure()
# What cudl/grade/_child.py does once every case passed: replay recorded launches, student against
# solution, through cudl.grade.speed.measure (now bench_pair). A serial kernel against a parallel one.
from cudl.grade.speed import MIN_FACTOR, is_slow, measure, solution_source  # noqa: E402

SCALE = r"""
extern "C" __global__ void scale_fast(const float* __restrict__ x, float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void scale_serial(const float* __restrict__ x, float* __restrict__ y, int n) {
    if (threadIdx.x != 0) return;  // one thread of each block does the block's 256 elements
    for (int j = 0; j < 256; ++j) {
        const int i = blockIdx.x * 256 + j;
        if (i < n) y[i] = 2.0f * x[i];
    }
}
"""
m = 2**24
xs, ys = cudl.randn(m), cudl.poisoned(m)
fast, serial = cudl.load(SCALE, "scale_fast"), cudl.load(SCALE, "scale_serial")
args = (((m + 255) // 256,), (256,), (xs, ys, m))
serial(*args)
cudl.check(ys, 2.0 * cudl.to_numpy(xs).astype("float64"), name="scale_serial")
slow_vs_fast = measure([(serial, args, {})], [(fast, args, {})])
same = measure([(fast, args, {})], [(fast, args, {})])
slow = is_slow(slow_vs_fast["student"], slow_vs_fast["solution"], 2.0)
self_slow = is_slow(same["student"], same["solution"], MIN_FACTOR)
print(f"measure(serial, fast): {slow_vs_fast}\nmeasure(fast, fast): {same}", flush=True)
rows.append(f"{'speed: serial vs fast (ms)':34s} {min(slow_vs_fast['student']):.3f} vs "
            f"{max(slow_vs_fast['solution']):.3f}: {'SLOW' if slow else 'PASS'}")
rows.append(f"{'speed: fast vs fast (ms)':34s} {min(same['student']):.3f} vs {max(same['solution']):.3f}: "
            f"{'SLOW' if self_slow else 'PASS'}")
if not (len(slow_vs_fast["student"]) == 3 and slow):
    failures.append(f"the serial kernel is not SLOW: {slow_vs_fast}")
if self_slow:
    failures.append(f"a kernel against itself is SLOW: {same}")

# ------------------------------------------------------------------ 4. unit tests on the GPU
# test_speed_on_a_gpu needs solutions/*.ipynb (the published block_sum solution); round 1's copy had none
have_solutions = solution_source("block_sum") is not None
print(f"cudl from {cudl.__file__}; solutions/ with block_sum: {have_solutions}", flush=True)
t = time.time()
res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_bench.py",
                      "tests/test_profiling.py",
                      *(["tests/test_graders.py::test_speed_on_a_gpu"] if have_solutions else []),
                      "tests/test_graders.py::test_speed_noise_never_makes_the_solution_slow"],
                     capture_output=True, text=True, timeout=240, cwd=ROOT)
tail = (res.stdout + res.stderr).strip().splitlines()
print("\n".join(tail[-15:]), flush=True)
rows.append(f"{'pytest (bench_pair, profiling, speed)':34s} {tail[-1] if tail else '?'} ({time.time() - t:.0f} s)")
if res.returncode:
    failures.append("pytest failed")

print(f"\n{cudl.gpu_name()}, {time.time() - T0:.0f} s")
print("\n".join(rows))
print("PASS" if not failures else "FAIL: " + "; ".join(failures))
sys.exit(1 if failures else 0)
