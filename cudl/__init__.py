"""cudl: the one helper package of "CUDA for Deep Learning".

    import cudl
    cudl.setup()                                   # banner; registers the %%gpu cell magic
    xp = cudl.xp                                   # CuPy on a GPU, NumPy on the CPU emulator
    k = cudl.load("01-first-kernel/vector_add.cu", "vector_add")
    k(grid, block, (x, y, out, n))                 # launched like a CuPy RawKernel
    cudl.check(out, ref)                           # relative error vs a float64 reference
    t = cudl.bench(lambda: k(...), bytes=3 * 4 * n) # CUDA events, L2 flush, median; % of a 1:1 copy
    t = cudl.bench(f, bytes=(8 * n, 4 * n))        # (read, written): % of the stream with that traffic
    t = cudl.bench(f, flops=2 * n**3, compute="fp16")  # % of the fp16 GEMM ceiling (no precision: no %)
    p = cudl.bench_pair(run, torch_call, flops=f)  # the two timed in turn, 3 rounds; p.ratio
    cudl.record(t, chapter="01-first-kernel", shape=n, dtype="float32", baseline=t_torch)
    cudl.ncu(snippet, kernel="vector_add")         # Nsight Compute metrics of one launch, as a table
    tuned = cudl.autotune("name", space, build, run, check=c, shape=s, source=f)  # build options per GPU, cached
    flash = cudl.kernels_module("12-flash-attention/flash.py")  # a chapter's launchers
    cudl.mimic("t4")                               # before loading: a T4's build and limits on a newer GPU
"""

from . import grade
from .autotune import Tuned, autotune
from .backend import address, on_gpu, require_gpu, size, sync, to_numpy
from .backend import backend as backend_name
from .bench import Pair, Timing, bench, bench_pair, flush_l2, measurable, sweep
from .ceilings import DATASHEET, ceilings, datasheet, memory_ceiling
from .check import check, compare, poisoned, randn
from .compile import kernels_module
from .counters import Counters, counters
from .env import banner, device_info, glue, gpu_name, max_shared_per_block, setup, show, span
from .errors import CompileError, CudlError, EmulatorUnsupported, GpuOnly, KernelFault, KernelTimeout
from .kernel import Kernel, load
from .mimicry import mimic
from .ncu import ncu
from .record import load_records, record

__all__ = [
    "DATASHEET", "CompileError", "CudlError", "EmulatorUnsupported", "GpuOnly", "Kernel", "KernelFault",
    "Timing", "address", "backend_name", "banner", "bench", "ceilings", "check", "compare", "datasheet",
    "device_info", "flush_l2", "glue", "gpu_name", "grade", "load", "load_records", "ncu", "on_gpu", "poisoned",
    "randn", "record", "require_gpu", "setup", "show", "size", "span", "sweep", "sync", "to_numpy",
]
__all__ += ["Counters", "KernelTimeout", "counters"]  # emulator checks (issue 7)
__all__ += ["max_shared_per_block"]  # a block's opt-in shared memory on this (or the mimicked) card
__all__ += ["mimic"]  # a T4's or an A100's code path on a newer GPU (issue 24)
__all__ += ["Pair", "bench_pair", "measurable"]  # a kernel timed in turn with its baseline; noise-aware verdicts
__all__ += ["Tuned", "autotune"]  # build options chosen per GPU and shape, checked, timed, cached (issue 24)
__all__ += ["memory_ceiling"]  # the bandwidth ceiling of a traffic: 'copy', 'read' or (bytes read, bytes written)
__all__ += ["kernels_module"]  # a chapter's launchers (kernels_src/NN-slug/*.py), one copy for all users


def __getattr__(name: str):
    if name == "xp":  # resolved on use, so CUDL_BACKEND can still be set after import
        from .backend import xp

        return xp()
    raise AttributeError(f"module 'cudl' has no attribute {name!r}")
