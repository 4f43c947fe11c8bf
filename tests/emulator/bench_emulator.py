"""Throughput of the CPU emulator in emulated CUDA threads per second (issue 3's speed targets).

    CUDL_BACKEND=emulator python tests/emulator/bench_emulator.py

Targets on a 2-core CI machine: >= 20 M threads/s for a barrier-free kernel (threads run as a plain loop),
>= 2 M threads/s for a kernel with barriers (threads run as fibers). CUDL_EMULATOR_THREADS sets the cores.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("CUDL_BACKEND", "emulator")

import numpy as np  # noqa: E402

import cudl  # noqa: E402

TARGETS = {"barrier-free": 20e6, "barriers": 2e6, "shuffles": 2e6}

SRC = r"""
extern "C" __global__ void vector_add(const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {  // 8 more barriers
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void warp_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);  // 5 shuffles
    if (threadIdx.x % 32 == 0) out[i / 32] = v;
}
"""


def _rate(launch, threads: int, repeat: int = 3) -> float:
    launch()  # compile, warm caches and fiber stacks
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        launch()
        best = min(best, time.perf_counter() - t)
    return threads / best


def measure(n_plain: int = 1 << 22, n_sync: int = 1 << 19) -> dict[str, float]:
    """Emulated threads per second for the three kinds of kernel."""
    x = np.random.default_rng(0).standard_normal(max(n_plain, n_sync)).astype(np.float32)
    out = np.zeros_like(x)
    add = cudl.load(SRC, "vector_add")
    blocks = (n_plain + 255) // 256
    rates = {"barrier-free": _rate(lambda: add(blocks, 256, (x, x, out, n_plain)), blocks * 256)}
    red = cudl.load(SRC, "block_sum")
    sblocks = (n_sync + 255) // 256
    part = np.zeros(sblocks, np.float32)
    rates["barriers"] = _rate(lambda: red(sblocks, 256, (x, part, n_sync)), sblocks * 256)
    ws = cudl.load(SRC, "warp_sum")
    wout = np.zeros(n_sync // 32 + 8, np.float32)
    rates["shuffles"] = _rate(lambda: ws(sblocks, 256, (x, wout, n_sync)), sblocks * 256)
    return rates


def main() -> None:
    cores = os.environ.get("CUDL_EMULATOR_THREADS") or str(os.cpu_count())
    print(f"CPU emulator throughput ({cores} worker threads, {os.cpu_count()} cores visible)")
    for kind, rate in measure().items():
        verdict = "ok" if rate >= TARGETS[kind] else "BELOW TARGET"
        print(f"  {kind:13s} {rate / 1e6:7.1f} M threads/s   (target >= {TARGETS[kind] / 1e6:.0f} M/s on 2 cores: "
              f"{verdict})")


if __name__ == "__main__":
    main()
