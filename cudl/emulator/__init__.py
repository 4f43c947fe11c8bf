"""The CPU emulator backend of cudl: CUDA C compiled unchanged as C++17 with g++, run on the CPU.

`compile_module(source, shown, options, names)` is called by `cudl.load` when there is no GPU (or
`CUDL_BACKEND=emulator`). How it works:

* The source is compiled with `#include "cudl_prelude.h"` (include/: qualifiers, built-in variables,
  vector types, math, atomics, __half/__nv_bfloat16, WMMA) and, per kernel, generated entry points
  `__cudl_block_N` (all threads of a block in a plain loop) and `__cudl_thread_N` (one thread, run as a
  fiber). Libraries are cached by content hash in $CUDL_CACHE or ~/.cache/cudl/emulator.
* runtime.cpp (compiled once, loaded RTLD_GLOBAL) runs the blocks on worker threads
  ($CUDL_EMULATOR_THREADS, default: the CPU cores). Kernels with barriers or warp primitives run every
  thread as a fiber with its own stack ($CUDL_EMULATOR_STACK bytes, default 64 KiB); `__syncthreads()`
  and warp primitives are rendezvous points of the fiber scheduler.
* Array arguments are copied into guarded buffers whose end touches a PROT_NONE page, so an access past
  the end faults; the fault becomes KernelFault naming the argument, element, thread and block.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .. import compile as cc
from ..compile import Param, format_log, strip_comments, with_line_directive
from ..errors import CompileError, EmulatorUnsupported, KernelFault
from . import ptx

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
RUNTIME_SRC = HERE / "runtime.cpp"
CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ["-std=c++17", "-O2", "-shared", "-fPIC", "-pthread", "-w", "-fno-strict-aliasing", "-fwrapv",
              "-fno-math-errno", "-fno-exceptions", "-fno-rtti", "-fvisibility=hidden"]
OPTIONAL_FLAGS = ["-fno-finite-loops",  # a spin loop must spin (and time out) as on a GPU, not be deleted
                  "-fstack-clash-protection"]  # big stack frames touch every page: overflow hits the guard page

# Features the emulator cannot run: (regex on the source without comments, what the message calls it).
UNSUPPORTED = [
    (r"\bmemcpy_async\b|cuda::pipeline", "memcpy_async / cuda::pipeline"),  # inline PTX: ptx.py
    (r"\bwgmma\b", "wgmma"),
    (r"\bCUtensorMap\b|cp\.async\.bulk|cuda::barrier|cuda::ptx", "TMA / cuda::barrier"),
    (r"\bthis_multi_grid\b", "cooperative-groups multi-grid sync"),
    (r"<<<", "dynamic parallelism (a kernel launching a kernel with <<<...>>>)"),
    (r"\b__cluster_dims__\b|\bthis_cluster\b", "thread block clusters"),
]
# Anything that needs every thread of a block to be a fiber.
NEEDS_FIBERS = re.compile(
    r"__syncthreads|__syncwarp|__shfl|__ballot_sync|__any_sync|__all_sync|__activemask|__reduce_\w+_sync|"
    r"__match_\w+_sync|\bwmma\b|cooperative_groups|#\s*include\s*\"|\basm\b|\b__asm__\b|__pipeline_\w+")


class _Launch(ctypes.Structure):
    _fields_ = [
        ("block_fn", ctypes.c_void_p), ("thread_fn", ctypes.c_void_p), ("tid_ptr", ctypes.c_void_p),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
        ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_ulonglong),
        ("fibers", ctypes.c_int), ("workers", ctypes.c_int), ("stack_size", ctypes.c_ulonglong),
        ("interruptible", ctypes.c_int),
        ("status", ctypes.c_int), ("is_write", ctypes.c_int), ("addr", ctypes.c_ulonglong),
        ("tid", ctypes.c_uint * 3), ("bid", ctypes.c_uint * 3), ("msg", ctypes.c_char * 1024),
    ]


# ---------------------------------------------------------------------------- building

@functools.lru_cache(maxsize=1)
def cxxflags() -> tuple[str, ...]:
    """BASE_FLAGS + the OPTIONAL_FLAGS this compiler accepts (older g++ and clang lack some), probed once."""
    key = hashlib.sha256((_compiler_id() + " ".join(OPTIONAL_FLAGS)).encode()).hexdigest()[:16]
    memo = cache_dir() / f"flags-{key}"
    if memo.is_file():
        return (*BASE_FLAGS, *memo.read_text().split())
    ok = []
    with tempfile.TemporaryDirectory(prefix="cudl-emu-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int probe(int x) { return x + 1; }\n")
        for flag in OPTIONAL_FLAGS:
            proc = subprocess.run([CXX, *BASE_FLAGS, "-Werror", flag, str(src), "-o", str(Path(tmp) / "p.so")],
                                  capture_output=True)
            if proc.returncode == 0:
                ok.append(flag)
    tmp_memo = memo.with_suffix(f".{os.getpid()}.tmp")
    tmp_memo.write_text(" ".join(ok))
    os.replace(tmp_memo, memo)
    return (*BASE_FLAGS, *ok)


def cache_dir() -> Path:
    d = Path(os.environ.get("CUDL_CACHE") or Path.home() / ".cache" / "cudl") / "emulator"
    d.mkdir(parents=True, exist_ok=True)
    return d


@functools.lru_cache(maxsize=1)
def _compiler_id() -> str:
    try:
        return subprocess.run([CXX, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise EmulatorUnsupported(f"the CPU emulator needs a C++17 compiler ({CXX}): {exc}") from None


@functools.lru_cache(maxsize=1)
def _prelude_hash() -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in INCLUDE.rglob("*") if p.is_file()):
        h.update(f.relative_to(INCLUDE).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _pch_dir() -> list[str]:
    """-I flags that put a precompiled cudl_prelude.h first (built once per cache; about halves g++ time).

    g++ uses `cudl_prelude.h.gch` when it sits next to the header it finds and the flags match; otherwise it
    silently reads the header itself, so a stale or unusable PCH costs nothing but the time to build it.
    """
    if os.environ.get("CUDL_EMULATOR_PCH", "1") == "0":
        return []
    key = hashlib.sha256((_compiler_id() + _prelude_hash() + " ".join(cxxflags())).encode()).hexdigest()[:32]
    d = cache_dir() / f"pch-{key}"
    if not (d / "cudl_prelude.h.gch").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="pch-", dir=cache_dir()))
        tmp.chmod(0o755)
        (tmp / "cudl_prelude.h").write_bytes((INCLUDE / "cudl_prelude.h").read_bytes())
        flags = [f for f in cxxflags() if f != "-shared"]
        proc = subprocess.run([CXX, *flags, f"-I{INCLUDE}", "-x", "c++-header", str(tmp / "cudl_prelude.h"),
                               "-o", str(tmp / "cudl_prelude.h.gch")], capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            return []
        try:
            os.rename(tmp, d)  # atomic; another process may have won the race, which is fine
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return [f"-I{d}"]


def _build(cpp_text: str, key_extra: str, extra_flags: list[str], what: str) -> tuple[Path, str]:
    """Compile C++ text to a cached shared library; return (path, "") or (path, compiler log) on failure."""
    key = hashlib.sha256("\0".join([_compiler_id(), _prelude_hash(), " ".join(cxxflags()), key_extra,
                                    " ".join(extra_flags), cpp_text]).encode()).hexdigest()[:32]
    out = cache_dir() / f"{what}-{key}.so"
    if out.is_file():
        return out, ""
    with tempfile.TemporaryDirectory(prefix="cudl-emu-") as tmp:
        src = Path(tmp) / "kernel.cpp"
        src.write_text(cpp_text)
        so = Path(tmp) / "kernel.so"
        proc = subprocess.run([CXX, *cxxflags(), *extra_flags, f"-I{INCLUDE}", str(src), "-o", str(so)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return out, proc.stderr
        fd, tmp_out = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
        os.close(fd)
        Path(tmp_out).write_bytes(so.read_bytes())
        os.chmod(tmp_out, 0o644)
        os.replace(tmp_out, out)  # atomic: parallel graders may build the same library
    return out, ""


@functools.lru_cache(maxsize=1)
def runtime() -> ctypes.CDLL:
    flags = ["-fvisibility=default"] + (["-DCUDL_UCONTEXT"] if os.environ.get("CUDL_EMULATOR_UCONTEXT") == "1" else [])
    path, log = _build(RUNTIME_SRC.read_text(), "runtime", flags, "runtime")
    if log:
        raise CompileError("the emulator runtime does not compile:\n" + log)
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    global _PAGE
    lib.cudl_page_size.restype = ctypes.c_size_t
    _PAGE = lib.cudl_page_size()
    lib.cudl_launch_kernel.argtypes = [ctypes.POINTER(_Launch)]
    lib.cudl_launch_kernel.restype = None
    lib.cudl_guarded_alloc.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(ctypes.c_size_t)]
    lib.cudl_guarded_alloc.restype = ctypes.c_void_p
    lib.cudl_guarded_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.cudl_guarded_free.restype = None
    lib.cudl_take_printf.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.cudl_take_printf.restype = ctypes.c_size_t
    lib.cudl_printf_pending.restype = ctypes.c_size_t
    lib.cudl_cancel.restype = None
    return lib


def check_supported(source: str, shown: str, options: tuple[str, ...] = ()) -> None:
    """Raise EmulatorUnsupported for features the CPU cannot emulate, in the code the compiler sees (an
    inactive `#if` branch or an unused macro may hold them)."""
    text = cc.preprocess(source, tuple(options), True)
    for pattern, what in UNSUPPORTED:
        m = re.search(pattern, text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            if m.group() == "<<<" and not _in_device_code(text, m.start()):
                raise CompileError(f"{shown}:{line}: a kernel launch <<<...>>> in host code: cudl.load compiles "
                                   "device code only (as NVRTC does); keep the kernels and launch them from "
                                   "Python: k(grid, block, (args...))")
            raise EmulatorUnsupported(f"not supported on the CPU emulator: {what} ({shown}:{line}); "
                                      "run this cell on a GPU")
    ptx.translate(text, shown)  # refuses inline PTX the emulator does not know, naming the instruction


def _in_device_code(text: str, pos: int) -> bool:
    """Whether `pos` lies in the body of a __global__ or __device__ function (by the head of its outermost block)."""
    depth, start = 0, -1
    for i in range(pos):
        if text[i] == "{":
            depth += 1
            if depth == 1:
                start = i
        elif text[i] == "}":
            depth -= 1
    if depth == 0 or start < 0:
        return False
    head = text[max(text.rfind(";", 0, start), text.rfind("}", 0, start)) + 1:start]
    return bool(re.search(r"\b(__global__|__device__)\b", head))


_EXTERN_SHARED = re.compile(
    r"\bextern\s+(?P<spec>(?:(?:__shared__|__align__\s*\(\s*\w+\s*\)|alignas\s*\(\s*\w+\s*\)|"
    r"volatile|const)\s+)*)(?P<type>[\w:<>,\s]+?)\s*(?P<spec2>(?:(?:__shared__|__align__\s*\(\s*\w+\s*\)|"
    r"alignas\s*\(\s*\w+\s*\))\s*)*)\b(?P<name>\w+)\s*\[\s*\](?P<dims>(?:\s*\[[^\]]+\])*)\s*;")


def rewrite(source: str, shown: str) -> str:
    """Source changes that keep every line in place: dynamic shared memory, `static __shared__`."""
    source = ptx.translate(source, shown, strict=False)  # inline PTX -> calls of include/cudl_ptx.h, lines kept
    text = strip_comments(source)  # find matches on the comment-free text, apply at the same offsets
    out, pos = [], 0
    for m in _EXTERN_SHARED.finditer(text):
        if "__shared__" not in m.group("spec") + m.group("spec2") + m.group("type"):
            continue
        depth = text.count("{", 0, m.start()) - text.count("}", 0, m.start())
        typ = " ".join(m.group("type").replace("__shared__", " ").split())
        vol = "volatile " if "volatile" in m.group("spec") else ""
        name, dims = m.group("name"), "".join(m.group("dims").split())
        ptr = f"({vol}{typ} (*){dims})" if dims else f"({vol}{typ}*)"
        if depth > 0:
            decl = f"{vol}{typ} (*{name}){dims}" if dims else f"{vol}{typ}* {name}"
            new = f"{decl} = {ptr}__cudl_dynamic_smem();"
        else:  # at file scope: a macro, then restore the line number
            line = text.count("\n", 0, m.end()) + 1
            new = f"\n#define {name} ({ptr}__cudl_dynamic_smem())\n#line {line} \"{shown}\"\n"
        out += [source[pos:m.start()], new]
        pos = m.end()
    out.append(source[pos:])
    return re.sub(r"\bstatic\s+__shared__\b", "__shared__", "".join(out))


def fiber_kernels(source: str, kernels: list[str]) -> set[str]:
    """Kernels that need fibers: their body, or a function/struct they name (transitively), uses a barrier,
    a warp primitive or WMMA. Conservative: a macro or a local #include that does puts every kernel on fibers."""
    text = strip_comments(source)
    if any(NEEDS_FIBERS.search(line) for line in re.findall(r"^\s*#\s*(?:define|include)[^\n]*", text, re.M)):
        return set(kernels)
    units: list[tuple[set[str], str]] = []  # (names a top-level block defines, its text)
    depth, start, head_start = 0, 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                head = text[head_start:start]
                names = set(re.findall(r"(\w+)\s*(?:<[^<>{};]*>\s*)?\(", head)[-1:])
                names |= set(re.findall(r"\b(?:struct|class|union|namespace)\s+(\w+)", head))
                units.append((names, head + text[start:i + 1]))
                head_start = i + 1
        elif ch == ";" and depth == 0:
            head_start = i + 1
    needs = {n for names, body in units if NEEDS_FIBERS.search(body) for n in names}
    changed = True
    while changed:
        changed = False
        for names, body in units:
            if not names <= needs and needs & set(re.findall(r"\w+", body)):
                needs |= names
                changed = True
    return {k for k in kernels if needs & set(re.findall(r"\w+", k.split("<")[0]))}  # ns::k: "ns" or "k"


# The GPUs whose limits the emulator can enforce (CUDL_EMULATOR_DEVICE; per-block limits from cudl.occupancy's
# table of the CUDA C++ Programming Guide). Static shared memory is at most 48 KiB on all of them (ptxas).
DEVICES = {"T4": ("Tesla T4", "7.5", 40), "A100": ("NVIDIA A100", "8.0", 108), "H100": ("NVIDIA H100", "9.0", 132)}


def device() -> dict[str, Any]:
    """The limits the emulator enforces: a T4's by default (Colab's GPU), so that what runs here runs there."""
    from ..occupancy import LIMITS

    key = os.environ.get("CUDL_EMULATOR_DEVICE", "T4").upper()
    if key not in DEVICES:
        raise ValueError(f"CUDL_EMULATOR_DEVICE={key}: choose one of {', '.join(DEVICES)}")
    name, cc, sms = DEVICES[key]
    lim = LIMITS[cc]
    return dict(name=name, cc=cc, sms=sms, max_threads_per_block=lim.max_threads_per_block,
                max_smem_per_block_optin=lim.smem_per_block)


# Headers the emulator provides itself: an NVRTC without CUDA's headers is no judge of sources that use them.
_SHIMS = {p.name for p in INCLUDE.rglob("*") if p.is_file()}


def nvrtc_check(source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...]) -> dict[str, Any]:
    """Compile with NVRTC first, as a GPU run would (CompileError with NVRTC's message when it refuses the
    source); registers and static shared memory per kernel for sm_80. Cached on disk by content hash.
    Returns {} where NVRTC (cuda-bindings + nvidia-cuda-nvrtc) is not installed, or CUDL_EMULATOR_NVRTC=0."""
    if os.environ.get("CUDL_EMULATOR_NVRTC", "1") == "0":
        return {}
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return {}
    version = ".".join(map(str, nvrtc.nvrtcVersion()[1:]))
    key = "\0".join([version, *cc.cuda_include_dirs(), shown, *options, "|", *names, source])
    key = hashlib.sha256(key.encode()).hexdigest()[:32]
    memo = cache_dir() / f"nvrtc-{key}.json"
    if memo.is_file():
        got = json.loads(memo.read_text())
    else:
        try:
            opts = tuple(o for o in options if not o.startswith(("-arch", "--gpu-architecture")))  # ours: sm_80
            got = {"resources": cc.nvrtc_resources(source, shown, "sm_80", opts, names)}
        except CompileError as exc:
            # A header missing from this machine's CUDA (not the source's fault) makes NVRTC no judge here.
            missing = re.findall(r'^(.*?):\d+: .*cannot open source file "([^"]+)"', str(exc), re.M)
            env = missing and all(f != shown or Path(h).name in _SHIMS for f, h in missing)
            got = {"resources": {}} if env else {"error": str(exc)}
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(got))
        os.replace(tmp, memo)
    if "error" in got:
        raise CompileError(got["error"])
    return got["resources"]


def compile_module(source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...]) -> Module:
    """`names`: the kernels to launch (template instances as name expressions, e.g. `gelu<__half>`)."""
    return _compile_module(source, shown, tuple(options), tuple(names))


# NVRTC has none of <math.h>'s macros and the prelude hides them; a -D of one of them comes back after it.
_MATH_MACROS = ("INFINITY", "NAN", "HUGE_VALF", "HUGE_VAL")


@functools.lru_cache(maxsize=256)
def _compile_module(source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...]) -> Module:
    check_supported(source, shown, options)
    flags = cc.define_flags(options)
    redefine = "".join(f"#define {f[2:].partition('=')[0]} {f.partition('=')[2] or 1}\n" for f in flags
                       if f.startswith("-D") and f[2:].partition("=")[0] in _MATH_MACROS)
    # Entry points for every kernel at file scope the compiler sees, so that the kernels of one file share
    # one library; should that fail, for the requested ones only.
    decls = cc.kernel_decls(cc.preprocess(source, options, True))
    found = [d.name for d in decls if d.template is None and d.at_file_scope]
    qualified = {k.split("::")[-1]: k for k in found}
    names = tuple(qualified.get(n, n) for n in names)
    accessors = "".join(f"CUDL_GLOBAL({g})\n" for g in cc.global_vars(source, options, True))
    rt = runtime()  # load first: kernel libraries resolve __cudl_rt_* against it
    pch = _pch_dir()

    def build(kernels: tuple[str, ...]) -> tuple[Path, str]:
        entries = "\n".join(f"CUDL_ENTRY({i}, {k})" for i, k in enumerate(kernels))
        text = ('#include "cudl_prelude.h"\n' + redefine + with_line_directive(rewrite(source, shown), shown) +
                '\n#line 1 "<cudl entry points>"\n' + entries + "\n" + accessors)
        return _build(text, "", [*pch, *flags], "kernel")

    kernels = tuple(dict.fromkeys([*found, *names]))
    with ThreadPoolExecutor(1) as pool:  # g++ builds while NVRTC checks
        first = pool.submit(build, kernels)
        resources = nvrtc_check(source, shown, options, names)
        path, log = first.result()
    if log and kernels != names:
        kernels = names
        path, log = build(kernels)
    if log:
        raise CompileError(f"{shown} does not compile (g++, CPU emulator):\n" + format_log(log, source, shown)
                           + cc.hints(log))
    lib = ctypes.CDLL(str(path))
    index = {k: i for i, k in enumerate(kernels)}
    index.update({k.split("::")[-1]: i for k, i in index.items() if "<" not in k})
    return Module(lib, rt, shown, index, fiber_kernels(source, list(kernels)), resources)


# ---------------------------------------------------------------------------- launching

def _workers() -> int:
    env = os.environ.get("CUDL_EMULATOR_THREADS", "").strip()
    if env:
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


_PAGE = 4096  # replaced by the runtime's page size on first use


class _Guarded:
    """One guarded copy of a group of overlapping arrays (aliases share it)."""

    def __init__(self, rt: ctypes.CDLL, lo: int, hi: int, arrays: list[np.ndarray]):
        self.rt, self.lo, self.hi, self.arrays = rt, lo, hi, arrays
        n = hi - lo
        base, length = ctypes.c_void_p(), ctypes.c_size_t()
        self.data = rt.cudl_guarded_alloc(n, ctypes.byref(base), ctypes.byref(length))
        if not self.data:
            raise MemoryError(f"the emulator cannot allocate a guarded buffer of {n} bytes")
        self.base, self.length = base.value, length.value
        self.padded = (n + 15) // 16 * 16
        self.front = (self.data - self.base) % _PAGE  # bytes of the first data page before the data
        ctypes.memmove(self.data, lo, n)
        # Canaries where an access does not fault: the alignment slack after the end, the page before the start.
        ctypes.memset(self.data + n, 0xA5, self.padded - n)
        ctypes.memset(self.data - self.front, 0xA5, self.front)

    def refill(self) -> None:
        ctypes.memmove(self.data, self.lo, self.hi - self.lo)

    def ptr(self, a: np.ndarray) -> int:
        return self.data + (a.__array_interface__["data"][0] - self.lo)

    def slack_written(self) -> str:
        """'after the end' / 'before the start' when a canary changed, else ''."""
        n = self.hi - self.lo
        if ctypes.string_at(self.data + n, self.padded - n) != b"\xa5" * (self.padded - n):
            return "past the end"
        if ctypes.string_at(self.data - self.front, self.front) != b"\xa5" * self.front:
            return "before the start"
        return ""

    def copy_back(self) -> None:
        if all(a.flags.writeable for a in self.arrays):
            ctypes.memmove(self.lo, self.data, self.hi - self.lo)

    def free(self) -> None:
        self.rt.cudl_guarded_free(self.base, self.length)


def _bounds(a: np.ndarray) -> tuple[int, int]:
    lo = a.__array_interface__["data"][0]
    return lo, lo + a.nbytes


class Module:
    """A compiled kernel library; `launch` is called by cudl.Kernel.__call__."""

    def __init__(self, lib: ctypes.CDLL, rt: ctypes.CDLL, shown: str, index: dict[str, int], fibers: set[str],
                 resources: dict[str, Any] | None = None):
        self.lib, self.rt, self.shown, self.index, self.fibers = lib, rt, shown, index, fibers
        self.resources = resources or {}  # kernel -> {"regs", "shared"} as NVRTC compiles it for sm_80
        self._entry_cache: dict[int, tuple[int, int, int]] = {}

    def global_memory(self, name: str) -> tuple[int, int]:
        """(address, bytes) of a `__constant__` or `__device__` variable of the module."""
        try:
            fn = getattr(self.lib, f"__cudl_global_{name}")
        except AttributeError:
            raise KeyError(f"no __constant__ or __device__ variable {name!r} at file scope of {self.shown}") from None
        fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.POINTER(ctypes.c_ulonglong)]
        n = ctypes.c_ulonglong()
        return fn(ctypes.byref(n)), n.value

    def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[Any],
               params: list[Param], shared_mem: int = 0) -> None:
        if name not in self.index:
            known = ", ".join(self.index) or "none"
            raise CompileError(f"kernel {name!r} is not in {self.shown} (compiled: {known}); a template kernel "
                               "needs its instance, e.g. cudl.load(file, 'gelu<__half>')")
        i = self.index[name]
        keep: list[Any] = []  # storage that must outlive the call
        argv = (ctypes.c_void_p * max(1, len(args)))()
        arrays = [(k, a) for k, (p, a) in enumerate(zip(params, args)) if p.is_pointer and a is not None]
        for _, a in arrays:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"the CPU emulator takes NumPy arrays, got {type(a).__name__}")
            if not (a.flags.c_contiguous or a.flags.f_contiguous):
                raise TypeError("the CPU emulator needs contiguous arrays: pass np.ascontiguousarray(x)")
        # Group arrays whose memory overlaps (aliases, views of one base) into one guarded copy.
        spans = sorted((_bounds(a) + (k,) for k, a in arrays), key=lambda t: t[0])
        groups: list[list[tuple[int, int, int]]] = []
        for s in spans:
            if groups and s[0] < max(t[1] for t in groups[-1]):
                groups[-1].append(s)
            else:
                groups.append([s])
        guards: dict[int, _Guarded] = {}
        owned: list[_Guarded] = []
        try:
            for g in groups:
                gd = _Guarded(self.rt, g[0][0], max(t[1] for t in g), [args[k] for _, _, k in g])
                owned.append(gd)
                for _, _, k in g:
                    guards[k] = gd
            for k, (p, a) in enumerate(zip(params, args)):
                if p.is_pointer:
                    v = ctypes.c_void_p(guards[k].ptr(a) if k in guards else None)
                else:
                    v = np.array(a) if isinstance(a, (np.generic, np.ndarray)) else np.asarray(a)
                    v = np.ascontiguousarray(v)
                keep.append(v)
                argv[k] = ctypes.addressof(v) if isinstance(v, ctypes.c_void_p) else v.ctypes.data
            L = _Launch()
            L.block_fn, L.thread_fn, L.tid_ptr = self._entries(i)
            L.args = argv
            L.grid[:], L.block[:] = grid, block
            L.shared_mem = int(shared_mem)
            L.fibers = int(name in self.fibers)
            L.workers = _workers()
            L.stack_size = int(os.environ.get("CUDL_EMULATOR_STACK", 64 * 1024))
            L.stack_size = (L.stack_size + 4095) // 4096 * 4096
            self._run(L)
            if L.status == 6:  # a barrier the source scan did not see: run again, every thread a fiber
                self.fibers.add(name)
                for gd in owned:
                    gd.refill()
                L.fibers = 1
                self._run(L)
            if L.status == 7:  # interrupted: Python raises KeyboardInterrupt at its next check
                return
            for gd in owned:  # writes made before a fault are kept, as on a GPU
                gd.copy_back()
            self._flush_printf()
            if L.status == 2 and L.msg.startswith(b"not supported on the CPU emulator"):
                raise EmulatorUnsupported(f"{L.msg.decode()}; run this cell on a GPU")
            if L.status:
                raise KernelFault(self._fault_message(L, name, params, args, guards))
            for k, gd in guards.items():
                side = gd.slack_written()
                if side:
                    p = params[k]
                    raise KernelFault(f"out-of-bounds write {side} of {p.name} ({p.name} has "
                                      f"{args[k].size} elements) in {name} ({self.shown})")
        finally:
            for gd in owned:
                gd.free()

    def _entries(self, i: int) -> tuple[int, int, int]:
        """Addresses of kernel i's entry points and of the library's threadIdx accessor (memoized)."""
        if i not in self._entry_cache:
            self._entry_cache[i] = tuple(ctypes.cast(getattr(self.lib, sym), ctypes.c_void_p).value
                                         for sym in (f"__cudl_block_{i}", f"__cudl_thread_{i}", "__cudl_tid_ptr"))
        return self._entry_cache[i]

    def _run(self, L: _Launch) -> None:
        """The launch. From Python's main thread the runtime catches Ctrl-C itself: it stops the workers, then
        hands SIGINT back to Python, which raises KeyboardInterrupt when the call returns."""
        L.interruptible = int(threading.current_thread() is threading.main_thread())
        self.rt.cudl_launch_kernel(ctypes.byref(L))

    def _flush_printf(self) -> None:
        n = self.rt.cudl_printf_pending()
        if n:
            buf = ctypes.create_string_buffer(n)
            got = self.rt.cudl_take_printf(buf, n)
            sys.stdout.write(buf.raw[:got].decode(errors="replace"))
            sys.stdout.flush()

    def _fault_message(self, L: _Launch, name: str, params: list[Param], args: list[Any],
                       guards: dict[int, _Guarded]) -> str:
        who = f"thread ({L.tid[0]},{L.tid[1]},{L.tid[2]}) of block ({L.bid[0]},{L.bid[1]},{L.bid[2]})"
        where = f"in {name} ({self.shown})"
        if L.status == 2:
            return f"{L.msg.decode(errors='replace')}, in {who} {where}"
        if L.status == 4:
            return f"{L.msg.decode(errors='replace')}, in {name} ({self.shown})"
        if L.status == 3:
            return (f"stack overflow of {who} {where}: large local arrays or deep recursion? "
                    "(kernels with barriers or warp primitives get CUDL_EMULATOR_STACK bytes per thread, "
                    "default 65536)")
        addr = L.addr
        rw = {1: "write", 0: "read"}.get(L.is_write, "access")
        if L.status == 5:
            off = ctypes.c_longlong(addr).value
            return (f"out-of-bounds {rw} of dynamic shared memory at byte {off} (the launch gave shared_mem="
                    f"{L.shared_mem} bytes) by {who} {where}")
        # The argument whose guarded buffer (or guard pages) holds the address; nearest end wins.
        best = None
        for k, gd in guards.items():
            if gd.base <= addr < gd.base + gd.length:
                start = gd.ptr(args[k])
                dist = 0 if start <= addr < start + args[k].nbytes else min(abs(addr - start),
                                                                            abs(addr - start - args[k].nbytes))
                if best is None or dist < best[0]:
                    best = (dist, k, start)
        if best is not None:
            _, k, start = best
            a, p = args[k], params[k]
            idx = (addr - start) // a.itemsize if addr >= start else -((start - addr + a.itemsize - 1) // a.itemsize)
            return (f"out-of-bounds {rw} of {p.name}[{idx}] ({p.name} has {a.size} elements) by {who} {where}")
        if addr < 65536:
            return f"invalid {rw} at address {addr:#x} (a null pointer?) by {who} {where}"
        return f"invalid {rw} at address {addr:#x} (not inside any argument array) by {who} {where}"
