"""The emulator's race check (CUDL_EMULATOR_RACECHECK=1): wrong kernels are refused with a message that names
the array, the element, both threads and both lines; correct kernels in many styles raise no alarm.

A GPU has no such check (compute-sanitizer's racecheck is a separate tool), so the file is skipped there.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_conformance import ATOMICS, BARRIERS  # tests/emulator is on sys.path (pytest rootdir import)

import cudl

pytestmark = pytest.mark.skipif(cudl.on_gpu(), reason="the emulator's race check")

WRONG = r"""
extern "C" __global__ void partial_sums(const float* x, float* partials, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) partials[blockIdx.x] += x[i];          // line 4: every thread of a block, no atomic
}
extern "C" __global__ void shared_between_barriers(const float* x, float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    float left = s[(threadIdx.x + 63) % 64];          // line 10: reads a neighbour's element ...
    s[threadIdx.x] = left;                            // line 11: ... which the neighbour overwrites
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
extern "C" __global__ void warp_tail_without_syncwarp(const float* x, float* out) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t < 32) {
        volatile float* v = s;
        v[t] += v[t + 32];
        v[t] += v[t + 16];                            // lanes read what other lanes write
        v[t] += v[t + 8];
        v[t] += v[t + 4];
        v[t] += v[t + 2];
        v[t] += v[t + 1];
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void last_block_writes(float* out) {
    if (threadIdx.x == 0) out[0] = (float)blockIdx.x;  // line 32: one element, every block
}
extern "C" __global__ void dynamic_shared_race(float* out) {
    extern __shared__ float buf[];
    buf[threadIdx.x / 2] = threadIdx.x;               // line 36: two threads per element
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x / 2];
}
__device__ int launches_seen;
extern "C" __global__ void count_in_device_variable(float* out) {
    launches_seen++;                                  // line 42: every thread, no atomic
    out[threadIdx.x] = (float)launches_seen;
}
extern "C" __global__ void reset_then_atomic(const float* x, float* total) {
    if (threadIdx.x == 0) *total = 0.0f;              // line 46: a plain write ...
    atomicAdd(total, x[threadIdx.x]);                 // line 47: ... racing with the other threads' atomics
}
"""

RIGHT = r"""
#define FULL 0xffffffffu
extern "C" __global__ void grid_stride_scale(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = 2 * x[i];
}
extern "C" __global__ void shfl_xor_sum(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(FULL, v, m);
    if (threadIdx.x % 32 == 0) atomicAdd(out, v);
}
extern "C" __global__ void padded_transpose(const float* a, float* b, int n) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = a[y * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    if (x < n && y < n) b[y * n + x] = tile[threadIdx.x][threadIdx.y];
}
extern "C" __global__ void naive_matmul(const float* a, const float* b, float* c, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n || col >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < n; k++) acc += a[row * n + k] * b[k * n + col];
    c[row * n + col] = acc;
}
extern "C" __global__ void shared_histogram(const int* x, int* hist, int n) {
    __shared__ int h[16];
    if (threadIdx.x < 16) h[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&h[x[i] & 15], 1);
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&hist[threadIdx.x], h[threadIdx.x]);
}
extern "C" __global__ void warp_tail_with_syncwarp(const float* x, float* out) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t < 32) {
        float v = s[t] + s[t + 32];
        for (int k = 16; k > 0; k /= 2) {
            __syncwarp();
            s[t] = v;
            __syncwarp();
            v += s[t ^ k];
        }
        if (t == 0) out[blockIdx.x] = v;
    }
}
extern "C" __global__ void broadcast_bias(const float* x, const float* bias, float* y, int n, int c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + bias[i % c];               // every block reads the same bias
}
"""


@pytest.fixture
def racecheck(monkeypatch):
    monkeypatch.setenv("CUDL_EMULATOR_RACECHECK", "1")


def _fault(name: str, grid, block, args, shared_mem: int = 0) -> str:
    k = cudl.load(WRONG, name)
    with pytest.raises(cudl.KernelFault) as exc:
        k(grid, block, args, shared_mem=shared_mem)
    return str(exc.value)


def test_read_modify_write_of_partials(racecheck):
    x = np.ones(256, np.float32)
    msg = _fault("partial_sums", 4, 64, (x, np.zeros(4, np.float32), 256))
    assert "data race on partials[0]" in msg
    assert re.search(r"write by thread \(\d,0,0\) of block \(0,0,0\) at <kernel source>:4", msg)
    assert re.search(r"read by thread \(\d,0,0\) of block \(0,0,0\) at <kernel source>:4", msg)
    assert "atomicAdd" in msg


def test_shared_memory_race_between_two_barriers(racecheck):
    x = np.arange(64, dtype=np.float32)
    msg = _fault("shared_between_barriers", 1, 64, (x, np.zeros(64, np.float32)))
    assert "data race on s[" in msg and "(shared memory)" in msg
    assert ":10" in msg and ":11" in msg
    assert "thread (0,0,0)" in msg or "thread (1,0,0)" in msg


def test_missing_syncwarp_in_warp_synchronous_tail(racecheck):
    x = np.ones(64, np.float32)
    msg = _fault("warp_tail_without_syncwarp", 1, 64, (x, np.zeros(1, np.float32)))
    assert "data race on s[" in msg and "__syncwarp()" in msg
    lines = [int(n) for n in re.findall(r"<kernel source>:(\d+)", msg)]
    assert len(lines) == 2 and all(22 <= n <= 27 for n in lines), msg  # both inside the tail


def test_cross_block_race_on_global_memory(racecheck):
    msg = _fault("last_block_writes", 3, 32, (np.zeros(1, np.float32),))
    assert "data race on out[0]" in msg and "two blocks" in msg
    assert "block (0,0,0)" in msg and "block (1,0,0)" in msg


def test_dynamic_shared_memory_race(racecheck):
    msg = _fault("dynamic_shared_race", 1, 64, (np.zeros(64, np.float32),), shared_mem=32 * 4)
    assert "data race on buf[0]" in msg and ":36" in msg


def test_plain_write_racing_with_atomics(racecheck):
    msg = _fault("reset_then_atomic", 1, 64, (np.ones(64, np.float32), np.zeros(1, np.float32)))
    assert "data race on total[0]" in msg and ":46" in msg and ":47" in msg and "then atomic operation by" in msg


def test_race_on_a_device_variable(racecheck):
    msg = _fault("count_in_device_variable", 1, 32, (np.zeros(32, np.float32),))
    assert "data race on launches_seen (__device__ variable)" in msg and ":42" in msg


def test_race_check_is_off_by_default(monkeypatch):
    monkeypatch.delenv("CUDL_EMULATOR_RACECHECK", raising=False)
    partials = np.zeros(4, np.float32)
    cudl.load(WRONG, "partial_sums")(4, 64, (np.ones(256, np.float32), partials, 256))
    np.testing.assert_array_equal(partials, 64.0)  # threads of a block run one after another: no lost update


def test_correct_kernels_raise_no_alarm(racecheck):
    rng = np.random.default_rng(1)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    cudl.load(RIGHT, "grid_stride_scale")(3, 128, (x, y, n))
    np.testing.assert_allclose(y, 2 * x)
    out = np.zeros(1, np.float32)
    cudl.load(RIGHT, "shfl_xor_sum")(4, 256, (x, out, n))
    np.testing.assert_allclose(out[0], x.sum(), rtol=1e-4)
    m = 40
    a = rng.standard_normal((m, m)).astype(np.float32)
    b = np.full_like(a, np.nan)
    cudl.load(RIGHT, "padded_transpose")((2, 2), (32, 32), (a, b, m))
    np.testing.assert_array_equal(b, a.T)
    c = np.full_like(a, np.nan)
    cudl.load(RIGHT, "naive_matmul")((3, 3), (16, 16), (a, a, c, m))
    np.testing.assert_allclose(c, a.astype(np.float64) @ a, rtol=1e-4, atol=1e-4)
    ints = rng.integers(0, 1 << 20, n).astype(np.int32)
    hist = np.zeros(16, np.int32)
    cudl.load(RIGHT, "shared_histogram")(3, 128, (ints, hist, n))
    np.testing.assert_array_equal(hist, np.bincount(ints & 15, minlength=16))
    out = np.full(1, np.nan, np.float32)
    cudl.load(RIGHT, "warp_tail_with_syncwarp")(1, 64, (x[:64], out))
    np.testing.assert_allclose(out[0], x[:64].sum(), rtol=1e-4)
    partials = np.full(4, np.nan, np.float32)
    cudl.load(BARRIERS, "block_sum")(4, 256, (x, partials, n))  # a tree reduction in shared memory
    np.testing.assert_allclose(partials.sum(), x.sum(), rtol=1e-4)
    mx = np.full(1, -np.inf, np.float32)
    cudl.load(ATOMICS, "cas_max")(4, 256, (x, mx, n))  # the CAS idiom: a plain read, then atomicCAS retries
    assert mx[0] == x.max()
    bias = rng.standard_normal(7).astype(np.float32)
    cudl.load(RIGHT, "broadcast_bias")(4, 256, (x, bias, y, n, 7))
    np.testing.assert_allclose(y, x + bias[np.arange(n) % 7])


def test_last_block_finish_with_threadfence_is_not_a_race(racecheck):
    """Chapter 4's one-pass reduction: partials written, __threadfence(), a ticket by atomicAdd; the last
    block reads every partial. Release (fence, atomic) and acquire (atomic, fence) order the blocks."""
    k = cudl.load("04-reductions/reduce_6_onepass.cu", "sum_onepass")
    x = np.random.default_rng(2).random(5000).astype(np.float32)
    partials = np.full(6, np.nan, np.float32)
    counter, out = np.zeros(1, np.uint32), np.full(1, np.nan, np.float32)
    k(6, 128, (x, partials, counter, out, x.size))
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-4)
    assert counter[0] == 0


def test_process_survives_and_normal_launches_follow(racecheck, monkeypatch):
    x = np.ones(256, np.float32)
    _fault("partial_sums", 4, 64, (x, np.zeros(4, np.float32), 256))
    monkeypatch.delenv("CUDL_EMULATOR_RACECHECK")
    y = np.zeros(256, np.float32)
    cudl.load(RIGHT, "grid_stride_scale")(2, 64, (x, y, 256))
    np.testing.assert_array_equal(y, 2.0)


def test_book_reduction_kernels_raise_no_alarm():
    """Chapter 4's kernels (barriers, shuffles, atomics, the last-block finish) pass their own tests with the
    race check on. (All of tests/kernels/ passes with it too; that takes minutes, so it is not run here.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, CUDL_EMULATOR_RACECHECK="1", CUDL_BACKEND="emulator")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           "tests/kernels/test_04_reductions.py"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]


SECOND_READER = r"""
extern "C" __global__ void write_after_two_reads(float* out) {
    __shared__ float s[1];
    if (threadIdx.x == 0) s[0] = 1.0f;
    __syncthreads();
    float v = 0.0f;
    if (threadIdx.x == 0 || threadIdx.x == 32) v = s[0];   // two readers since the write: thread 0, then 32
    __syncwarp();                                           // thread 0 waits for its warp; warp 1 runs meanwhile
    if (threadIdx.x == 0) s[0] = v + 1.0f;                  // races with thread 32's read (not with its own)
    __syncthreads();
    out[threadIdx.x] = v;
}
"""


def test_race_with_the_second_reader_is_reported(racecheck):
    """A cell keeps two reads since its last write: here the first is the writer's own (no race), so only a
    check of the second reader finds the race; a check that looked at one reader would pass this kernel."""
    k = cudl.load(SECOND_READER, "write_after_two_reads")
    with pytest.raises(cudl.KernelFault) as exc:
        k(1, 64, (np.zeros(64, np.float32),))
    lines = SECOND_READER.split("\n")
    read = next(i + 1 for i, ln in enumerate(lines) if "two readers" in ln)
    write = next(i + 1 for i, ln in enumerate(lines) if "races with thread 32" in ln)
    assert str(exc.value).startswith(
        f"data race on s[0] (shared memory): read by thread (32,0,0) of block (0,0,0) at <kernel source>:{read}, then "
        f"write by thread (0,0,0) of block (0,0,0) at <kernel source>:{write}; no __syncthreads() between the two "
        "accesses"), exc.value


CP_ASYNC = r"""
// Each thread copies 16 bytes into shared memory with cp.async and waits for its own copy; another thread's
// copy is safe to read only after a __syncthreads() (`barrier` = 1).
extern "C" __global__ void neighbour_after_wait(const float4* x, float4* y, int barrier) {
    __shared__ float4 s[64];
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(&s[threadIdx.x]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(a), "l"(x + threadIdx.x));
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);                                                // lands
    if (barrier) __syncthreads();
    if (threadIdx.x > 0) y[threadIdx.x] = s[threadIdx.x - 1];                                    // read
}
"""


def test_missing_barrier_after_cp_async_wait_is_a_race(racecheck):
    """wait_group waits for this thread's copies only: reading a neighbour's copy needs a barrier. The race check
    sees a cp.async's destination written by the thread that issued it (when issued and when it lands: here the
    landing, at the wait, is the last write)."""
    x = np.arange(256, dtype=np.float32).reshape(64, 4)
    y = np.zeros_like(x)
    k = cudl.load(CP_ASYNC, "neighbour_after_wait")
    k(1, 64, (x, y, 1))
    np.testing.assert_array_equal(y[1:], x[:-1])
    with pytest.raises(cudl.KernelFault) as exc:
        k(1, 64, (x, y, 0))
    lines = CP_ASYNC.split("\n")
    lands = next(i + 1 for i, ln in enumerate(lines) if "// lands" in ln)
    read = next(i + 1 for i, ln in enumerate(lines) if "// read" in ln)
    assert re.match(rf"data race on s\[0\] \(shared memory\): write by thread \(0,0,0\) of block \(0,0,0\) at "
                    rf"<kernel source>:{lands}, then read by thread \(1,0,0\) of block \(0,0,0\) at <kernel source>:"
                    rf"{read}; threads of one warp, with no __syncwarp\(\) or __syncthreads\(\) between the two "
                    r"accesses", str(exc.value)), exc.value
