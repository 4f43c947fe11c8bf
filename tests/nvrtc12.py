"""NVRTC 12 (the CUDA 12.x compiler that CuPy uses on Colab) through ctypes, beside cuda-bindings' NVRTC 13.

cuda-bindings 12 and 13 cannot be installed together, so this calls the C API of the `libnvrtc.so.12` that the
PyPI package `nvidia-cuda-nvrtc-cu12` ships directly; its file names differ from NVRTC 13's, so both coexist.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from pathlib import Path

from cudl.compile import KERNELS_DIR, NVRTC_OPTIONS, format_log, with_line_directive
from cudl.errors import CompileError


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    dirs = list(spec.submodule_search_locations or []) if spec else []
    return Path(dirs[0]) if dirs else None


def include_dir() -> str | None:
    """CUDA 12's headers (cuda_fp16.h, mma.h, ...) from nvidia-cuda-runtime-cu12: NVRTC 12 has none built in."""
    d = _package_dir("nvidia.cuda_runtime")
    return str(d / "include") if d and (d / "include" / "cuda_fp16.h").is_file() else None


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """libnvrtc.so.12 from nvidia-cuda-nvrtc-cu12, or None when that package is not installed."""
    d = _package_dir("nvidia.cuda_nvrtc")
    so = d / "lib" / "libnvrtc.so.12" if d else None
    if not (so and so.is_file()):
        return None
    lib = ctypes.CDLL(str(so))
    ptr, char_pp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ptr), ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.c_int, char_pp, char_pp]
    lib.nvrtcAddNameExpression.argtypes = [ptr, ctypes.c_char_p]
    lib.nvrtcCompileProgram.argtypes = [ptr, ctypes.c_int, char_pp]
    lib.nvrtcGetProgramLogSize.argtypes = [ptr, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [ptr, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ptr)]
    return lib


def version() -> tuple[int, int]:
    """(major, minor) of the loaded NVRTC."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_cubin(source: str, shown: str, arch: str = "sm_75", options: tuple[str, ...] = (),
                  name_expressions: tuple[str, ...] = ()) -> str:
    """Compile to a cubin for `arch` (NVRTC runs ptxas too); raise CompileError with the log on failure."""
    lib = library()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), with_line_directive(source, shown).encode(), shown.encode(),
                              0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    try:
        for expr in name_expressions:
            lib.nvrtcAddNameExpression(prog, expr.encode())
        inc = include_dir()
        # kernels_src/ for shared headers (#include "11-tensor-cores/tc_ptx.cuh"), as cudl.load passes it
        opts = [o.encode() for o in (f"-arch={arch}", "-std=c++17", *options, *NVRTC_OPTIONS, f"-I{KERNELS_DIR}",
                                     *([f"-I{inc}"] if inc else []))]
        err = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors="replace")
        if err:
            raise CompileError(f"{shown} does not compile with NVRTC 12 for {arch}:\n"
                               + format_log(text, source, shown))
        return text
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
