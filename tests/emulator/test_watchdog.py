"""The emulator's watchdog: a launch that makes no progress (a spin-wait on a flag that another thread must
set, an endless loop) stops with KernelFault within CUDL_EMULATOR_WATCHDOG seconds instead of hanging.

On a GPU such kernels hang for real, so the file is skipped there.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import cudl

pytestmark = pytest.mark.skipif(cudl.on_gpu(), reason="the emulator's watchdog")

SPIN = r"""
extern "C" __global__ void wait_for_later_thread(volatile int* flag, float* out) {
    if (threadIdx.x == 0) {
        while (flag[0] == 0) {}          // thread 1 would set it, but thread 0 runs first
    }
    if (threadIdx.x == 1) flag[0] = 1;
    out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void wait_after_barrier(float* out) {
    __shared__ volatile int ready;
    if (threadIdx.x == 0) ready = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
        while (!ready) {}                // set below by the last thread of the block
    }
    if (threadIdx.x == blockDim.x - 1) ready = 1;
    out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void endless(float* out, int n) {
    int i = 0;
    while (i < n) { out[0] += 1.0f; i = i * 1; }
}
extern "C" __global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


@pytest.fixture
def short_watchdog(monkeypatch):
    monkeypatch.setenv("CUDL_EMULATOR_WATCHDOG", "1.5")


def _stops(name: str, args, block: int = 64) -> tuple[str, float]:
    k = cudl.load(SPIN, name)
    t = time.perf_counter()
    with pytest.raises(cudl.KernelTimeout) as exc:  # a KernelFault that graders can call TIMEOUT
        k(2, block, args)
    return str(exc.value), time.perf_counter() - t


def test_spin_wait_in_plain_loop_is_stopped(short_watchdog):
    msg, took = _stops("wait_for_later_thread", (np.zeros(1, np.int32), np.zeros(64, np.float32)))
    assert took < 6, took
    assert "no progress for 1.5 s" in msg and re.search(r"thread \(0,0,0\) of block \([01],0,0\)", msg), msg
    assert "spin-wait" in msg and "CUDL_EMULATOR_WATCHDOG" in msg


@pytest.mark.parametrize("limit", [1.0, 2.0])
def test_fires_near_its_limit(limit, monkeypatch):
    """At the limit, not at twice it, nor early: the time without progress is measured on the clock (a loaded
    machine stretches the monitor's 50 ms ticks)."""
    monkeypatch.setenv("CUDL_EMULATOR_WATCHDOG", str(limit))
    msg, took = _stops("wait_for_later_thread", (np.zeros(1, np.int32), np.zeros(64, np.float32)))
    assert f"no progress for {limit:g} s" in msg, msg
    assert limit <= took < limit + 0.6, took


def test_spin_wait_after_a_barrier_is_stopped(short_watchdog):
    msg, took = _stops("wait_after_barrier", (np.zeros(64, np.float32),))
    assert took < 6, took
    assert "no progress" in msg and "thread (0,0,0)" in msg, msg


def test_endless_loop_is_stopped_and_the_process_goes_on(short_watchdog):
    msg, _ = _stops("endless", (np.zeros(1, np.float32), 1))
    assert "no progress" in msg
    x = np.arange(300, dtype=np.float32)
    y = np.zeros_like(x)
    cudl.load(SPIN, "copy")(3, 128, (x, y, x.size))
    np.testing.assert_array_equal(x, y)


def test_default_limit_fits_a_grader(monkeypatch):
    """Without the variable a hung launch stops after 10 s, well inside a grader's 15 s; 0 turns it off."""
    import ctypes

    from cudl.emulator import runtime

    rt = runtime()
    rt.cudl_watchdog_seconds.restype = ctypes.c_double
    monkeypatch.delenv("CUDL_EMULATOR_WATCHDOG", raising=False)
    assert rt.cudl_watchdog_seconds() == 10.0
    monkeypatch.setenv("CUDL_EMULATOR_WATCHDOG", "0")
    assert rt.cudl_watchdog_seconds() == 0.0


def test_a_long_but_progressing_launch_is_not_stopped(monkeypatch):
    monkeypatch.setenv("CUDL_EMULATOR_WATCHDOG", "0.5")
    n = 1 << 22
    x = np.ones(n, np.float32)
    y = np.zeros_like(x)
    k = cudl.load(SPIN, "copy")
    t = time.perf_counter()
    for _ in range(40):  # many launches of many blocks: each finished block counts as progress
        k(n // 256, 256, (x, y, n))
        if time.perf_counter() - t > 1.5:
            break
    np.testing.assert_array_equal(y, 1.0)
