"""Times each Part I challenge solution and a plausible slower variant on the grader's speed case (GPU only),
to choose the graders' `speed` factors; grades each solution first. Run: python tests/gpu/time_challenges.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import cudl  # noqa: E402
from cudl.grade import REGISTRY, _load_all, run  # noqa: E402

CHALLENGES = {"fma_float4": "01-first-kernel", "swap_axes": "02-execution-model", "swiglu_half2": "03-elementwise",
              "row_logsumexp": "04-reductions", "matmul_at_b": "05-matmul"}


def solution_source(name: str) -> str:
    text = (ROOT / "solutions" / f"{CHALLENGES[name]}.md").read_text()
    src = re.search(rf'{name}_src = r"""(.*?)"""', text, re.S).group(1)
    return "\n".join(line for line in src.splitlines() if "STUB" not in line and "SOLUTION" not in line)


# Slower variants: correct kernels that ignore the challenge's idea (not graded, timed only).
SCALAR_FMA = r"""
extern "C" __global__ void fma_float4(const float* x, const float* y, float* z, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = fmaf(x[i], y[i], z[i]);
}"""
NAIVE_SWAP = r"""
extern "C" __global__ void swap_axes(const float* in, float* out, int d0, int d1, int d2) {
    int j = blockIdx.z, k = blockIdx.x * 32 + threadIdx.x;
    for (int r = threadIdx.y; r < 32; r += 8) {
        int i = blockIdx.y * 32 + r;
        if (i < d0 && k < d2) out[((long long)k * d1 + j) * d0 + i] = in[((long long)i * d1 + j) * d2 + k];
    }
}"""
SCALAR_SWIGLU = r"""
#include <cuda_fp16.h>
extern "C" __global__ void swiglu_half2(const __half* x, __half* out, int rows, int hidden) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one output element per thread
    if (e >= (long long)rows * hidden) return;
    long long r = e / hidden, c = e % hidden;
    float g = __half2float(x[r * 2 * hidden + c]), u = __half2float(x[r * 2 * hidden + hidden + c]);
    out[e] = __float2half_rn(g / (1.0f + expf(-g)) * u);
}"""
TWO_PASS_LSE = r"""
extern "C" __global__ void row_logsumexp(const float* x, float* out, int rows, int cols) {
    int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + (long long)row * cols;
    float m = -__int_as_float(0x7f800000);
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(xr[c] - m);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
    if (lane == 0) out[row] = m + logf(s);
}"""
NAIVE_ATB = r"""
extern "C" __global__ void matmul_at_b(int M, int N, int K, const float* A, const float* B, float* C) {
    int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;  // 16 x 16 threads
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(long long)k * M + row] * B[(long long)k * N + col];
    C[(long long)row * N + col] = acc;
}"""


def launches(name: str, case: dict) -> tuple[list, float]:
    """[(label, source, grid, block, args)], bytes moved."""
    from cudl.grade.ch01 import fma_float4_launch

    xp = cudl.xp
    sol = solution_source(name)
    if name == "fma_float4":
        n = case["n"]
        x, y, z = (cudl.randn(n) for _ in range(3))
        g, b = fma_float4_launch(n)
        return [("solution", sol, g, b, (x, y, z, n)), ("scalar grid-stride", SCALAR_FMA, g, b, (x, y, z, n))], 16 * n
    if name == "swap_axes":
        d0, d1, d2 = case["d0"], case["d1"], case["d2"]
        x, out = cudl.randn((d0, d1, d2)), xp.empty((d2, d1, d0), dtype=np.float32)
        g, b = ((d2 + 31) // 32, (d0 + 31) // 32, d1), (32, 8)
        unpadded = sol.replace("tile[TILE][TILE + 1]", "tile[TILE][TILE]")
        return [("solution", sol, g, b, (x, out, d0, d1, d2)), ("unpadded tile", unpadded, g, b, (x, out, d0, d1, d2)),
                ("naive (strided writes)", NAIVE_SWAP, g, b, (x, out, d0, d1, d2))], 8 * d0 * d1 * d2
    if name == "swiglu_half2":
        rows, hidden = case["rows"], case["hidden"]
        x = (3 * cudl.randn((rows, 2 * hidden))).astype(np.float16)
        out = xp.empty((rows, hidden), dtype=np.float16)
        pairs = rows * hidden // 2
        return [("solution", sol, ((pairs + 255) // 256,), (256,), (x, out, rows, hidden)),
                ("scalar __half", SCALAR_SWIGLU, ((2 * pairs + 255) // 256,), (256,), (x, out, rows, hidden))], \
            6 * rows * hidden
    if name == "row_logsumexp":
        rows, cols = case["rows"], case["cols"]
        x, out = 4 * cudl.randn((rows, cols)) + 50, xp.empty(rows, dtype=np.float32)
        g = ((rows + 7) // 8,)
        return [("solution", sol, g, (256,), (x, out, rows, cols)),
                ("two-pass", TWO_PASS_LSE, g, (256,), (x, out, rows, cols))], 4 * rows * cols
    M, N, K = case["M"], case["N"], case["K"]
    a, b_, c = cudl.randn((K, M)), cudl.randn((K, N)), xp.empty((M, N), dtype=np.float32)
    return [("solution", sol, ((N + 63) // 64, (M + 63) // 64), (16, 16), (M, N, K, a, b_, c)),
            ("naive, one element per thread", NAIVE_ATB, ((N + 15) // 16, (M + 15) // 16), (16, 16),
             (M, N, K, a, b_, c))], 2.0 * M * N * K


def main() -> None:
    _load_all()
    rows = []
    for name in CHALLENGES:
        g = REGISTRY[name]
        verdict = run(name, solution_source(name), quiet=True)
        print(verdict.line, flush=True)
        runs, work = launches(name, g.speed["case"])
        base = None
        for label, src, grid, block, args in runs:
            kernel = cudl.load(src, name)
            times = [cudl.bench(lambda: kernel(grid, block, args)).ms for _ in range(2)]  # twice: the spread
            base = base or min(times)
            rows.append((name, label, times, min(times) / base, work))
    print(f"\n{cudl.gpu_name()}: median of each run, L2 flushed; GB/s (TFLOP/s for matmul) of the faster run")
    print(f"{'grader':<14} {'variant':<30} {'ms (two runs)':>20} {'x solution':>10} {'rate':>8}")
    for name, label, times, ratio, work in rows:
        rate = work / min(times) / 1e9 if name == "matmul_at_b" else work / min(times) / 1e6
        print(f"{name:<14} {label:<30} {times[0]:>9.4f} {times[1]:>9.4f} {ratio:>10.2f} {rate:>8.1f}")


if __name__ == "__main__":
    main()
