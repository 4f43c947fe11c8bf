"""What bad kernels get on the CPU emulator: clear errors naming the argument, the line, the thread and block.

A GPU does not catch these (or reports them differently), so the whole file is skipped there.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import cudl

pytestmark = pytest.mark.skipif(cudl.on_gpu(), reason="the emulator's own diagnostics")

BAD = r"""
extern "C" __global__ void write_all(float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.0f;  // no bounds check
}
extern "C" __global__ void read_before(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i - 1000];  // lands in the guard page before x
}
extern "C" __global__ void early_return(float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __syncthreads();
    y[i] = 2.0f;
}
extern "C" __global__ void two_barriers(float* __restrict__ y) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    y[threadIdx.x] = 1.0f;
}
extern "C" __global__ void smem_overflow(float* __restrict__ y) {
    extern __shared__ float s[];
    s[threadIdx.x] = 1.0f;  // the launch gives fewer bytes than threads * 4
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
extern "C" __global__ void copy(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def test_out_of_bounds_write_names_argument_index_thread_and_block():
    y = np.zeros(1000, np.float32)
    with pytest.raises(cudl.KernelFault) as e:
        cudl.load(BAD, "write_all")(4, 256, (y, 1000))
    msg = str(e.value)
    assert "y[1000]" in msg and "1000 elements" in msg, msg
    assert "write" in msg, msg
    assert "thread (232,0,0)" in msg and "block (3,0,0)" in msg, msg
    assert (y == 1.0).all()  # writes before the fault are kept, as on a GPU


def test_out_of_bounds_write_with_ragged_size():
    y = np.zeros(1001, np.float32)  # 4004 bytes: not a multiple of 16
    with pytest.raises(cudl.KernelFault, match=r"y\[100\d\]"):
        cudl.load(BAD, "write_all")(4, 256, (y, 1001))


def test_out_of_bounds_read_before_start():
    # A buffer ends at a guard page; what precedes it is padding up to the guard page before it, so only
    # reads far enough before the start fault (x[-1] is caught only when it is a write, by a canary, if at all).
    x = np.ones(256, np.float32)
    y = np.zeros(256, np.float32)
    with pytest.raises(cudl.KernelFault) as e:
        cudl.load(BAD, "read_before")(1, 256, (x, y, 256))
    msg = str(e.value)
    assert "x[-1000]" in msg and "thread (0,0,0)" in msg and "block (0,0,0)" in msg, msg


def test_partial_barrier_names_the_line():
    y = np.zeros(1000, np.float32)
    with pytest.raises(cudl.KernelFault) as e:
        cudl.load(BAD, "early_return")(4, 256, (y, 1000))
    msg = str(e.value)
    assert re.search(r"__syncthreads\(\) at <kernel source>:13\b", msg), msg
    assert "232 of 256" in msg and "block (3,0,0)" in msg, msg


def test_different_barriers_pass_with_a_warning():
    """GPUs since Volta let a block's halves meet at two __syncthreads() calls (SGEMM_CUDA's kernel 11 does):
    the emulator does too, and warns once, since CUDA calls it undefined (issue 8)."""
    y = np.zeros(64, np.float32)
    with pytest.warns(UserWarning, match=r"different __syncthreads\(\) calls \(<kernel source>:(18|20)"):
        cudl.load(BAD, "two_barriers")(1, 64, (y,))
    np.testing.assert_array_equal(y, 1.0)


def test_dynamic_shared_memory_overflow():
    with pytest.raises(cudl.KernelFault, match="shared"):
        cudl.load(BAD, "smem_overflow")(1, 256, (np.zeros(256, np.float32),), shared_mem=512)


def test_unsupported_inline_asm():
    src = r"""extern "C" __global__ void lane(int* out) {
        unsigned l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l)); out[threadIdx.x] = l;
    }"""
    with pytest.raises(cudl.EmulatorUnsupported, match="inline PTX asm"):
        cudl.load(src, "lane")


@pytest.mark.parametrize("snippet,what", [
    ("cuda::memcpy_async(s, x, 16, pipe);", "memcpy_async"),
])  # grid sync: refused at the sync (test_frontend.py)
def test_unsupported_features(snippet, what):
    src = f"""extern "C" __global__ void k(float* x) {{
        __shared__ float s[4];
        {snippet}
    }}"""
    with pytest.raises(cudl.EmulatorUnsupported, match=re.escape(what)):
        cudl.load(src, "k")


def test_compile_error_points_at_line():
    src = 'extern "C" __global__ void broken(float* y) {\n    y[threadIdx.x] = undefined_name;\n}\n'
    with pytest.raises(cudl.CompileError) as e:
        cudl.load(src, "broken")
    msg = str(e.value)
    assert "<kernel source>:2:" in msg and "undefined_name" in msg, msg


def test_non_contiguous_array_is_refused():
    x = np.ones((8, 8), np.float32)[:, ::2]
    with pytest.raises(TypeError, match="ascontiguousarray"):
        cudl.load(BAD, "copy")(1, 32, (x, np.zeros(32, np.float32), 32))


def test_process_survives_faults():
    for _ in range(3):
        with pytest.raises(cudl.KernelFault):
            cudl.load(BAD, "write_all")(2, 256, (np.zeros(300, np.float32), 300))
    x = np.arange(300, dtype=np.float32)
    y = np.zeros(300, np.float32)
    cudl.load(BAD, "copy")(2, 256, (x, y, 300))
    np.testing.assert_array_equal(x, y)


MORE = r"""
extern "C" __global__ void oob_after_barrier(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float s[128];
    s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];  // no bounds check: the last block reads past x
    __syncthreads();
    y[blockIdx.x] = s[0];
}
extern "C" __global__ void divide(const int* __restrict__ x, int* __restrict__ y, int d) {
    y[threadIdx.x] = x[threadIdx.x] / d;
}
extern "C" __global__ void deep_stack(float* __restrict__ y) {
    volatile float big[1 << 16];  // 256 KiB of locals: more than a fiber's stack
    for (int i = 0; i < (1 << 16); i++) big[i] = (float)i;
    __syncthreads();
    y[threadIdx.x] = big[threadIdx.x * 7];
}
"""


def test_out_of_bounds_in_a_kernel_with_barriers():
    x = np.ones(300, np.float32)
    with pytest.raises(cudl.KernelFault) as e:
        cudl.load(MORE, "oob_after_barrier")(3, 128, (x, np.zeros(3, np.float32), 300))
    msg = str(e.value)
    assert re.search(r"x\[3\d\d\]", msg) and "read" in msg and "block (2,0,0)" in msg, msg


def test_integer_division_by_zero_is_reported():
    with pytest.raises(cudl.KernelFault, match="division by zero"):
        cudl.load(MORE, "divide")(1, 32, (np.ones(32, np.int32), np.zeros(32, np.int32), 0))


def test_stack_overflow_is_reported():
    with pytest.raises(cudl.KernelFault, match=r"^stack overflow of thread \(0,0,0\) of block \(0,0,0\)"):
        cudl.load(MORE, "deep_stack")(1, 32, (np.zeros(32, np.float32),))


def test_stack_overflow_of_a_kernel_without_barriers_is_reported():
    """Threads without barriers run on the worker thread's own stack (8 MiB by default): 32 MiB of locals overflow
    it into the guard page below it, which the fault handler tells apart from an out-of-bounds access."""
    src = r"""extern "C" __global__ void huge_locals(float* y) {
        volatile float big[1 << 23];
        for (int i = 0; i < (1 << 23); i += 1024) big[i] = (float)i;
        y[threadIdx.x] = big[threadIdx.x * 1024];
    }"""
    with pytest.raises(cudl.KernelFault, match=r"^stack overflow of thread \(0,0,0\) of block \(0,0,0\)"):
        cudl.load(src, "huge_locals")(1, 32, (np.zeros(32, np.float32),))


def test_parallel_compiles_share_the_cache(tmp_path):
    """Graders compile in child processes at the same time: the cache must never hand out half a library."""
    import os
    import subprocess
    import sys

    code = ("import numpy as np, cudl\n"
            "k = cudl.load('extern \"C\" __global__ void f(int* y) { y[threadIdx.x] = 3 * threadIdx.x; }', 'f')\n"
            "y = np.zeros(64, np.int32); k(1, 64, (y,)); assert (y == 3 * np.arange(64)).all(); print('ok')\n")
    env = dict(os.environ, CUDL_BACKEND="emulator", CUDL_CACHE=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err


def test_math_h_macros_are_not_defined_as_on_nvrtc():
    """INFINITY compiles with g++ but not with NVRTC: the emulator must refuse it too, or CI passes and Colab fails."""
    src = 'extern "C" __global__ void k(float* x) { x[0] = -INFINITY; }'
    with pytest.raises(cudl.errors.CompileError, match="INFINITY"):
        cudl.load(src, "k")


SHUFFLES = r"""
extern "C" __global__ void half_mask_after_full(const float* x, float* out) {
    float v = x[threadIdx.x];
    v += __shfl_xor_sync(0xffffffff, v, 16);   // every lane
    v += __shfl_xor_sync(0x0000ffff, v, 8);    // lanes 16-31 call it too, but the mask leaves them out
    v += __shfl_xor_sync(0xffffffff, v, 4);
    out[threadIdx.x] = v;
}
extern "C" __global__ void lanes_wait_elsewhere(const float* x, float* out) {
    float v = x[threadIdx.x];
    if (threadIdx.x % 32 < 16) v = __shfl_sync(0xffffffff, v, 0);   // names lanes 16-31 ...
    __syncthreads();                                                // ... which wait here
    out[threadIdx.x] = v;
}
"""


def _line(src: str, text: str) -> int:
    found = [i + 1 for i, ln in enumerate(src.split("\n")) if text in ln]
    assert len(found) == 1, (text, found)
    return found[0]


def test_partial_mask_is_reported_at_its_own_line():
    """Exercise 7's mistake: a 0x0000ffff mask on the line after a full-mask shuffle, called by all 32 lanes.
    It used to be reported against the full-mask shuffle the first lanes had gone on to (or the line before);
    a lane that calls a warp primitive with a mask that leaves it out is the error, at that line."""
    with pytest.raises(cudl.KernelFault) as e:
        cudl.load(SHUFFLES, "half_mask_after_full")(1, 32, (np.ones(32, np.float32), np.zeros(32, np.float32)))
    line = _line(SHUFFLES, "0x0000ffff")
    assert str(e.value).startswith(
        f"__shfl_xor_sync at <kernel source>:{line}: mask 0x0000ffff does not name lane 16 of warp 0, which calls "
        "it (every lane that calls a warp primitive must be in its mask), in thread (16,0,0) of block (0,0,0)"), e.value


def test_stuck_shuffle_names_its_mask_and_the_lanes_that_wait_elsewhere():
    """The lanes a mask names that wait at another primitive keep the shuffle from completing: the message names
    the mask, those lanes and where they wait (a check that ignored lanes waiting elsewhere would let the shuffle
    complete without them, and this kernel would pass)."""
    with pytest.raises(cudl.KernelFault) as e:
        cudl.load(SHUFFLES, "lanes_wait_elsewhere")(1, 64, (np.ones(64, np.float32), np.zeros(64, np.float32)))
    shfl, bar = _line(SHUFFLES, "v = __shfl_sync(0xffffffff"), _line(SHUFFLES, "// ... which wait here")
    assert str(e.value) == (
        f"__shfl_sync at <kernel source>:{shfl} in warp 0 of block (0,0,0): mask 0xffffffff names lanes 16-31, which "
        "did not reach it (every lane the mask names must call the same primitive, unless it has exited); lanes "
        f"16-31 wait at __syncthreads() at <kernel source>:{bar}, in lanes_wait_elsewhere (<kernel source>)"), e.value
