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
    with pytest.raises(cudl.KernelFault, match="stack"):
        cudl.load(MORE, "deep_stack")(1, 32, (np.zeros(32, np.float32),))


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
