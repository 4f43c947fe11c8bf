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
  the end faults; the fault becomes KernelFault naming the argument, element, thread and block. Kernels are
  compiled with -fsanitize=alignment (handlers in runtime.cpp): a misaligned access faults as on a GPU.
  Shared memory is poisoned at every block start; CUDL_EMULATOR_RACECHECK=1 adds the race check, initcheck
  and array bounds (README.md).
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
from ..errors import CompileError, EmulatorUnsupported, KernelFault, KernelTimeout
from . import ptx

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
RUNTIME_SRC = HERE / "runtime.cpp"
CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ["-std=c++17", "-O2", "-shared", "-fPIC", "-pthread", "-w", "-fno-strict-aliasing", "-fwrapv",
              "-fno-math-errno", "-fno-exceptions", "-fno-rtti", "-fvisibility=hidden"]
OPTIONAL_FLAGS = ["-fno-finite-loops",  # a spin loop must spin (and time out) as on a GPU, not be deleted
                  "-fstack-clash-protection",  # big stack frames touch every page: overflow hits the guard page
                  # kernels only: every access through a pointer is checked for the alignment of its type (a float4
                  # at a float's address faults on a GPU); the handlers live in runtime.cpp, not in libubsan
                  "-fsanitize=alignment"]
SANITIZE = ("-fsanitize=",)  # flags of kernel libraries only (not of the runtime), compiled apart from the link

# Features the emulator cannot run: (regex on the source without comments, what the message calls it).
UNSUPPORTED = [
    (r"\bmemcpy_async\b|cuda::pipeline", "memcpy_async / cuda::pipeline"),  # inline PTX: ptx.py
    (r"\bwgmma\b", "wgmma"),
    (r"\bCUtensorMap\b|cp\.async\.bulk|cuda::barrier|cuda::ptx", "TMA / cuda::barrier"),
    (r"\bthis_multi_grid\b", "cooperative-groups multi-grid sync"),
    (r"<<<", "dynamic parallelism (a kernel launching a kernel with <<<...>>>)"),
    (r"\b__cluster_dims__\b|\bthis_cluster\b", "thread block clusters"),
    (r"\b__nv_cvt_\w*fp8\w*|\b__nv_fp8\w*", "fp8 conversions (cuda_fp8.h)"),
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
        ("reverse", ctypes.c_int), ("nsmem", ctypes.c_int), ("smem", ctypes.POINTER(ctypes.c_longlong)),
        ("tls_off", ctypes.c_longlong), ("ds_off", ctypes.c_longlong),
    ]


# ---------------------------------------------------------------------------- building

@functools.lru_cache(maxsize=1)
def cxxflags() -> tuple[str, ...]:
    """BASE_FLAGS + the OPTIONAL_FLAGS this compiler accepts (older g++ and clang lack some), probed once
    (compiled only: a sanitizer's library need not be installed, runtime.cpp has the handlers)."""
    key = hashlib.sha256((_compiler_id() + " ".join(OPTIONAL_FLAGS)).encode()).hexdigest()[:16]
    memo = cache_dir() / f"flags-{key}"
    if memo.is_file():
        return (*BASE_FLAGS, *memo.read_text().split())
    ok = []
    with tempfile.TemporaryDirectory(prefix="cudl-emu-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int probe(int x) { return x + 1; }\n")
        for flag in OPTIONAL_FLAGS:
            proc = subprocess.run([CXX, *BASE_FLAGS, "-Werror", flag, "-c", str(src), "-o", str(Path(tmp) / "p.o")],
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
    key = hashlib.sha256((_compiler_id() + _prelude_hash() + " ".join(kernel_flags())).encode()).hexdigest()[:32]
    d = cache_dir() / f"pch-{key}"
    if not (d / "cudl_prelude.h.gch").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="pch-", dir=cache_dir()))
        tmp.chmod(0o755)
        (tmp / "cudl_prelude.h").write_bytes((INCLUDE / "cudl_prelude.h").read_bytes())
        flags = [f for f in kernel_flags() if f != "-shared"]
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


def kernel_flags() -> list[str]:
    """Compiler flags of kernel libraries (the runtime has no sanitizer checks)."""
    return list(cxxflags())


def _build(cpp_text: str, key_extra: str, extra_flags: list[str], what: str) -> tuple[Path, str]:
    """Compile C++ text to a cached shared library; return (path, "") or (path, compiler log) on failure.
    Kernels (what == "kernel") get the sanitizer checks; they are linked apart, without the sanitizer's library."""
    flags = kernel_flags() if what == "kernel" else [f for f in cxxflags() if not f.startswith(SANITIZE)]
    key = hashlib.sha256("\0".join([_compiler_id(), _prelude_hash(), " ".join(flags), key_extra,
                                    " ".join(extra_flags), cpp_text]).encode()).hexdigest()[:32]
    out = cache_dir() / f"{what}-{key}.so"
    if out.is_file():
        return out, ""
    with tempfile.TemporaryDirectory(prefix="cudl-emu-") as tmp:
        src = Path(tmp) / "kernel.cpp"
        src.write_text(cpp_text)
        so = Path(tmp) / "kernel.so"
        if any(f.startswith(SANITIZE) for f in flags):
            obj = Path(tmp) / "kernel.o"
            proc = subprocess.run([CXX, *[f for f in flags if f != "-shared"], *extra_flags, f"-I{INCLUDE}", "-c",
                                   str(src), "-o", str(obj)], capture_output=True, text=True)
            if proc.returncode == 0:
                proc = subprocess.run([CXX, "-shared", "-fPIC", "-pthread", str(obj), "-o", str(so)],
                                      capture_output=True, text=True)
        else:
            proc = subprocess.run([CXX, *flags, *extra_flags, f"-I{INCLUDE}", str(src), "-o", str(so)],
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
    directives = [ln for ln in re.findall(r"^\s*#\s*(?:define|include)[^\n]*", text, re.M)  # a toolkit header
                  if not (m := re.match(r'\s*#\s*include\s*"([^"]+)"', ln)) or not cc.toolkit_header(m.group(1))]
    if any(NEEDS_FIBERS.search(line) for line in directives):
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


def device(key: str | None = None) -> dict[str, Any]:
    """The limits of GPU `key` of DEVICES; by default those the emulator enforces: CUDL_EMULATOR_DEVICE, else the
    card of CUDL_MIMIC, else a T4 (Colab's GPU), so that what runs here runs there. Mimic mode on a GPU uses it too."""
    from ..mimicry import card
    from ..occupancy import LIMITS

    key = (key or os.environ.get("CUDL_EMULATOR_DEVICE") or card() or "T4").upper()
    if key not in DEVICES:
        raise ValueError(f"CUDL_EMULATOR_DEVICE={key}: choose one of {', '.join(DEVICES)}")
    name, cc, sms = DEVICES[key]
    lim = LIMITS[cc]
    return dict(name=name, cc=cc, sms=sms, max_threads_per_block=lim.max_threads_per_block,
                max_smem_per_block_optin=lim.smem_per_block, regs_per_block=lim.regs_per_block,
                max_regs_per_thread=lim.max_regs_per_thread)


# Headers the emulator provides itself: an NVRTC without CUDA's headers is no judge of sources that use them.
_SHIMS = {p.name for p in INCLUDE.rglob("*") if p.is_file()}


def nvrtc_check(source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...],
                includes: str = "") -> dict[str, Any]:
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
    key = "\0".join([version, *cc.include_options(), includes, shown, *options, "|", *names, source])
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
    includes = cc.includes_digest(source, shown)  # in the cache key: an edited header builds anew
    mod = _compile_module(source, shown, tuple(options), tuple(names), includes)
    if checks_mode() & RACES and mod.index:  # build the instrumented library now, not inside the first launch
        mod._checked_entries(next(iter(mod.index.values())))
    return mod


# NVRTC has none of <math.h>'s macros and the prelude hides them; a -D of one of them comes back after it.
_MATH_MACROS = ("INFINITY", "NAN", "HUGE_VALF", "HUGE_VAL")


def header_flags(source: str, shown: str, options: tuple[str, ...] = ()) -> list[str]:
    """-I of a cached folder that mirrors kernels_src/ with the headers the source includes (`#include "..."`,
    recursively), each checked like the source (check_supported) and rewritten (inline PTX -> emulator calls),
    a `#line` first so that messages name the header and its own lines. [] when the source includes none."""
    texts = {}
    for name, path in cc.local_includes(source, shown):
        text = path.read_text()
        check_supported(text, name, options)
        texts[name] = f'#line 1 "{name}"\n' + rewrite(text, name)
    if not texts:
        return []
    key = hashlib.sha256("\0".join(f"{n}\0{t}" for n, t in texts.items()).encode()).hexdigest()[:32]
    d = cache_dir() / f"include-{key}"
    if not d.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix="include-", dir=cache_dir()))
        for name, text in texts.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, d)  # atomic; another process may have won the race, which is fine
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return [f"-I{d}"]


@functools.lru_cache(maxsize=256)
def _compile_module(source: str, shown: str, options: tuple[str, ...], names: tuple[str, ...],
                    includes: str = "") -> Module:
    check_supported(source, shown, options)
    hflags = header_flags(source, shown, options)
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

    def text_for(kernels: tuple[str, ...]) -> str:
        entries = "\n".join(f"CUDL_ENTRY({i}, {k})" for i, k in enumerate(kernels))
        return ('#include "cudl_prelude.h"\n' + redefine + with_line_directive(rewrite(source, shown), shown) +
                '\n#line 1 "<cudl entry points>"\n' + entries + "\n" + accessors)

    def build(kernels: tuple[str, ...]) -> tuple[Path, str]:
        return _build(text_for(kernels), "", [*pch, *flags, *hflags], "kernel")

    kernels = tuple(dict.fromkeys([*found, *names]))
    with ThreadPoolExecutor(1) as pool:  # g++ builds while NVRTC checks
        first = pool.submit(build, kernels)
        resources = nvrtc_check(source, shown, options, names, includes)
        path, log = first.result()
    if log and kernels != names:
        kernels = names
        path, log = build(kernels)
    if log:
        # inline PTX that translate() left as a static_assert and the compiler did meet (a macro-built template
        # in a compiled branch): the same refusal as for any other PTX the emulator does not know
        refused = re.search(r"static assertion failed: (not supported on the CPU emulator: .*?run this cell on a GPU)",
                            log)
        if refused:
            raise EmulatorUnsupported(refused.group(1))
        raise CompileError(f"{shown} does not compile (g++, CPU emulator):\n" + format_log(log, source, shown)
                           + cc.hints(log))
    lib = ctypes.CDLL(str(path))
    index = {k: i for i, k in enumerate(kernels)}
    index.update({k.split("::")[-1]: i for k, i in index.items() if "<" not in k})
    mod = Module(lib, rt, shown, index, fiber_kernels(source, list(kernels)), resources)
    mod.path = path
    mod._check_inputs = (text_for(kernels), [*flags, *hflags], source)  # for the instrumented build ("checks" below)
    return mod


# ---------------------------------------------------------------------------- launching

def schedule() -> str:
    """The order of a launch, from CUDL_EMULATOR_SCHEDULE (read at every launch): "forward" (the default), or
    "reverse": blocks handed out last first, and the threads of a block run last first, so that atomics land
    in another order (a sum made with atomicAdd of floats then differs in its last bits; a deterministic one
    does not)."""
    v = os.environ.get("CUDL_EMULATOR_SCHEDULE", "").strip().lower() or "forward"
    if v not in ("forward", "reverse"):
        raise ValueError(f"CUDL_EMULATOR_SCHEDULE={v!r}: choose forward or reverse")
    return v


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
    """One guarded copy of a group of overlapping arrays (aliases share it). The copy starts at the same
    address modulo 16 as the array (a view `x[1:]` of floats stays 4 bytes past a 16-byte boundary, as a CuPy
    view on a GPU does), so that the alignment checks see the alignment the kernel would get."""

    def __init__(self, rt: ctypes.CDLL, lo: int, hi: int, arrays: list[np.ndarray]):
        self.rt, self.lo, self.hi, self.arrays = rt, lo, hi, arrays
        n, skew = hi - lo, lo % 16
        base, length = ctypes.c_void_p(), ctypes.c_size_t()
        start = rt.cudl_guarded_alloc(skew + n, ctypes.byref(base), ctypes.byref(length))  # 16-byte aligned
        if not start:
            raise MemoryError(f"the emulator cannot allocate a guarded buffer of {n} bytes")
        self.data = start + skew
        self.base, self.length = base.value, length.value
        self.slack = (skew + n + 15) // 16 * 16 - skew - n  # bytes after the end, before the guard page
        self.front = (self.data - self.base) % _PAGE  # bytes of the first data page before the data
        ctypes.memmove(self.data, lo, n)
        # Canaries where an access does not fault: the alignment slack after the end, the page before the start.
        ctypes.memset(self.data + n, 0xA5, self.slack)
        ctypes.memset(self.data - self.front, 0xA5, self.front)

    def refill(self) -> None:
        ctypes.memmove(self.data, self.lo, self.hi - self.lo)

    def ptr(self, a: np.ndarray) -> int:
        return self.data + (a.__array_interface__["data"][0] - self.lo)

    def slack_written(self) -> str:
        """'after the end' / 'before the start' when a canary changed, else ''."""
        n = self.hi - self.lo
        if ctypes.string_at(self.data + n, self.slack) != b"\xa5" * self.slack:
            return "past the end"
        if ctypes.string_at(self.data - self.front, self.front) != b"\xa5" * self.front:
            return "before the start"
        return ""

    def copy_back(self) -> None:
        if all(a.flags.writeable for a in self.arrays):
            ctypes.memmove(self.lo, self.data, self.hi - self.lo)

    def free(self) -> None:
        self.rt.cudl_guarded_free(self.base, self.length)


@functools.lru_cache(maxsize=64)
def _library_symbols(path: str) -> list[tuple[str, int, int, int, str, int]]:
    """cudl.compile.elf_symbols of a kernel library (named by the hash of its content: cached by path)."""
    return cc.elf_symbols(Path(path).read_bytes())


def _bounds(a: np.ndarray) -> tuple[int, int]:
    lo = a.__array_interface__["data"][0]
    return lo, lo + a.nbytes


class Module:
    """A compiled kernel library; `launch` is called by cudl.Kernel.__call__."""

    def __init__(self, lib: ctypes.CDLL, rt: ctypes.CDLL, shown: str, index: dict[str, int], fibers: set[str],
                 resources: dict[str, Any] | None = None):
        self.lib, self.rt, self.shown, self.index, self.fibers = lib, rt, shown, index, fibers
        self.resources = resources or {}  # kernel -> {"regs", "shared"} as NVRTC compiles it for sm_80
        self.path: Path | None = None  # the library (its symbols name the __shared__ variables to poison)
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

    def variables(self) -> list[tuple[str, np.ndarray]]:
        """(symbol, bytes aliasing it) of every writable variable of the library, and of the race check's
        instrumented one if it is loaded (it has its own copies): `__device__`, `__constant__` and `static`
        variables are plain C++ globals here, in .data or .bss (thread-local ones are `__shared__`)."""
        out = []
        libs = [(self.path, self.lib), (getattr(self, "_checked_path", None), getattr(self, "_checked_lib", None))]
        for path, lib in libs:
            if path is None or lib is None:
                continue
            syms = _library_symbols(str(path))
            # where the library was loaded: an exported function's address less its offset in the file
            base = ctypes.cast(getattr(lib, "__cudl_tid_ptr"), ctypes.c_void_p).value - next(
                v for n, k, v, _, _, _ in syms if n == "__cudl_tid_ptr" and k == 2)
            for name, kind, value, size, section, _ in syms:
                if kind == 1 and size and (section in (".data", ".bss") or section.startswith((".data.", ".bss."))
                                           and not section.startswith(".data.rel.ro")):  # made read-only at load
                    raw = (ctypes.c_ubyte * size).from_address(base + value)
                    out.append((name, np.ctypeslib.as_array(raw)))
        return out

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
            mode = checks_mode()
            L = _Launch()
            L.block_fn, L.thread_fn, L.tid_ptr = self._entries(i) if not mode else self._checked_entries(i)
            L.args = argv
            L.grid[:], L.block[:] = grid, block
            L.shared_mem = int(shared_mem)
            L.fibers = int(name in self.fibers)
            L.workers = _workers()
            L.stack_size = int(os.environ.get("CUDL_EMULATOR_STACK", 64 * 1024))
            L.stack_size = (L.stack_size + 4095) // 4096 * 4096
            L.reverse = int(schedule() == "reverse")
            checked = bool(mode) and not getattr(self, "_checks_broken", None)
            smem = [v for _, off, size in _shared_symbols(self, checked) for v in (off, size)]
            smem_arr = (ctypes.c_longlong * max(1, len(smem)))(*smem)
            keep.append(smem_arr)
            L.nsmem, L.smem = len(smem) // 2, smem_arr
            ck = _checks_begin(self, mode, params, args, guards, shared_mem)
            self._run(L)
            if L.status == 6:  # a barrier the source scan did not see: run again, every thread a fiber
                self.fibers.add(name)
                for gd in owned:
                    gd.refill()
                L.fibers = 1
                _checks_begin(self, mode, params, args, guards, shared_mem)
                self._run(L)
            _checks_end(self, ck, mode, L, name)
            if L.status == 7:  # interrupted: Python raises KeyboardInterrupt at its next check
                return
            for gd in owned:  # writes made before a fault are kept, as on a GPU
                gd.copy_back()
            self._flush_printf()
            if L.status == 2 and L.msg.startswith(b"not supported on the CPU emulator"):
                raise EmulatorUnsupported(f"{L.msg.decode()}; run this cell on a GPU")
            if L.status:
                raise (KernelTimeout if L.status == 9 else KernelFault)(
                    self._fault_message(L, name, params, args, guards))
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
        if L.status in (4, 9):  # 9: the watchdog (KernelTimeout)
            return f"{L.msg.decode(errors='replace')}, in {name} ({self.shown})"
        if L.status == 8:
            return _race_message(self, L, name, params, args)
        if L.status == 11:
            return _uninit_message(self, L, name, params, args)
        if L.status == 10:
            what, line, align = L.msg.decode(errors="replace").split("\t")
            place = self._place(L, params, args, guards) or hex(L.addr)
            if line == "its launch":  # a pointer argument to a scalar type, checked when a block starts
                return (f"misaligned address: {what}, {place}, is not {align}-byte aligned (a GPU stops the kernel "
                        f"with \"misaligned address\" at its first access) {where}")
            return (f"misaligned address: {what} at {line} by {who}: {place} is not {align}-byte aligned (a GPU "
                    f"stops the kernel with \"misaligned address\") {where}")
        if L.status == 12:
            return _bounds_message(self, L, who, where)
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
        # Unmapped memory beyond the guard pages: name the argument array nearest to the address (an index far
        # out of range, e.g. a row index times the wrong width) and how far from it the address lies. At any
        # distance: where the operating system maps the guarded copies relative to other memory is not ours to
        # choose (a limit of 1 GiB made the message depend on the process's memory layout).
        near = []
        for k, gd in guards.items():
            start, a = gd.ptr(args[k]), args[k]
            near.append((start - addr if addr < start else addr - start - a.nbytes, k, start))
        if near:
            dist, k, start = min(near)
            a, p = args[k], params[k]
            idx = (addr - start) // a.itemsize if addr >= start else -((start - addr + a.itemsize - 1) // a.itemsize)
            side = "past the end of" if addr >= start else "before the start of"
            return (f"out-of-bounds {rw} of {p.name}[{idx}] ({p.name} has {a.size} elements; the address lies "
                    f"{dist:,} bytes {side} it, the nearest argument array) by {who} {where}")
        return f"invalid {rw} at address {addr:#x} (not inside any argument array) by {who} {where}"

    def _place(self, L: _Launch, params: list[Param], args: list[Any], guards: dict[int, _Guarded]) -> str:
        """The memory that holds a fault's address: `acc + 4 bytes (inside acc[1])`, `byte 4 of s (shared
        memory)`; "" if none is known."""
        addr = L.addr
        for k, gd in guards.items():
            start, a, p = gd.ptr(args[k]), args[k], params[k]
            if start <= addr < start + max(1, a.nbytes):
                off = addr - start
                at = "the address of" if off % a.itemsize == 0 else "inside"
                return f"{p.name} + {off} bytes ({at} {p.name}[{off // a.itemsize}])"
        checked = bool(checks_mode()) and not getattr(self, "_checks_broken", None)
        for var, off, size in _shared_symbols(self, checked):
            if off <= L.tls_off < off + size:
                return f"byte {L.tls_off - off} of {var} (shared memory)"
        if 0 <= L.ds_off < L.shared_mem:
            return f"byte {L.ds_off} of dynamic shared memory"
        return ""


# ---------------------------------------------------------------------------- checks: races and counters
# Check mode builds a second, instrumented library of the same source (g++ -fsanitize=thread: a call before
# every load, store and atomic), whose hooks live in runtime.cpp, and runs it on one worker thread.
# CUDL_EMULATOR_RACECHECK=1 turns the race check on for every launch; cudl.counters turns counting on for
# one launch. The normal, uninstrumented library and its speed are unchanged.

# -fsanitize=bounds: an index past a dimension of an array whose size the compiler knows (a static __shared__
# tile, a local array) is reported (handler in runtime.cpp), before it lands in a neighbouring variable.
# -fno-tree-sra: a float2 / float4 / struct copy stays one 8- or 16-byte access, as a GPU's ld.v2 / ld.v4 (split
# into its fields, a warp's float2 loads would count as two strided 4-byte requests, each a 2-way conflict).
CHECK_FLAGS = ["-fsanitize=thread", "-fsanitize=bounds", "-fno-tree-sra", "--param=tsan-instrument-func-entry-exit=0",
               "-g1"]
RACES, COUNTERS = 1, 2
_FORCED_MODE = 0  # bits set by cudl.counters while it launches
_KEEP: list[Any] = []  # the ctypes structures the runtime points at during a launch
_WARNED: set[tuple[str, str]] = set()
_LAST_COUNTS: dict[str, Any] = {}


class _Checks(ctypes.Structure):
    _fields_ = [
        ("mode", ctypes.c_int), ("nregions", ctypes.c_int), ("regions", ctypes.POINTER(ctypes.c_longlong)),
        ("race", ctypes.c_int), ("region", ctypes.c_int), ("offset", ctypes.c_ulonglong),
        ("blk", ctypes.c_ulonglong * 2), ("tid", ctypes.c_uint * 2), ("pc", ctypes.c_uint * 2),
        ("write", ctypes.c_uint * 2), ("atomic", ctypes.c_uint * 2),
    ]


class _Agg(ctypes.Structure):
    _fields_ = [(f, ctypes.c_ulonglong) for f in ("pc", "kind", "write", "requests", "units", "ideal", "lanes")]


def checks_mode() -> int:
    """The checks of the next launch: RACES when CUDL_EMULATOR_RACECHECK is set (not 0), | COUNTERS in
    cudl.counters."""
    mode = _FORCED_MODE
    if os.environ.get("CUDL_EMULATOR_RACECHECK", "").strip() not in ("", "0"):
        mode |= RACES
    return mode


def _build_checked(text: str, flags: list[str]) -> Path:
    """The instrumented library: compiled with -fsanitize=thread, linked without its runtime (our hooks)."""
    # str(INCLUDE) too: the debug lines name the prelude's path, and messages skip frames inside it
    key = hashlib.sha256("\0".join([_compiler_id(), _prelude_hash(), str(INCLUDE), " ".join(kernel_flags()), "checked",
                                    " ".join(CHECK_FLAGS + flags), text]).encode()).hexdigest()[:32]
    out = cache_dir() / f"checked-{key}.so"
    if out.is_file():
        return out
    with tempfile.TemporaryDirectory(prefix="cudl-emu-") as tmp:
        src, obj, so = Path(tmp) / "kernel.cpp", Path(tmp) / "kernel.o", Path(tmp) / "kernel.so"
        src.write_text(text)
        cflags = [f for f in kernel_flags() if f != "-shared"]
        check = CHECK_FLAGS if "clang" not in _compiler_id() else [
            "-fsanitize=thread", "-fsanitize=array-bounds", "-mllvm", "-tsan-instrument-func-entry-exit=0",
            "-gline-tables-only"]  # clang's -fsanitize=bounds adds local-bounds, which traps without a handler
        for cmd in ([CXX, *cflags, *check, *flags, f"-I{INCLUDE}", "-c", str(src), "-o", str(obj)],
                    [CXX, "-shared", "-fPIC", str(obj), "-o", str(so)]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise EmulatorUnsupported("the emulator's race check / counters cannot build this kernel "
                                          f"(g++ -fsanitize=thread):\n{proc.stderr[-2000:]}")
        fd, tmp_out = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
        os.close(fd)
        Path(tmp_out).write_bytes(so.read_bytes())
        os.chmod(tmp_out, 0o644)
        os.replace(tmp_out, out)
    return out


def _checked_entries(self: Module, i: int) -> tuple[int, int, int]:
    """Entry points of kernel i in the instrumented library (built on first use). If this compiler cannot
    build it, warn once and run the normal build: the launch goes on without checks."""
    if getattr(self, "_checks_broken", None):
        return self._entries(i)
    if getattr(self, "_checked_lib", None) is None:
        text, flags, _ = self._check_inputs
        try:
            self._checked_path = _build_checked(text, flags)
            self._checked_lib = ctypes.CDLL(str(self._checked_path))
        except (EmulatorUnsupported, OSError) as exc:
            import warnings

            self._checks_broken = str(exc)
            warnings.warn(f"{exc}\nthe launch runs without the race check / counters", stacklevel=4)
            return self._entries(i)
        self._checked_cache = {}
    if i not in self._checked_cache:
        self._checked_cache[i] = tuple(ctypes.cast(getattr(self._checked_lib, sym), ctypes.c_void_p).value
                                       for sym in (f"__cudl_block_{i}", f"__cudl_thread_{i}", "__cudl_tid_ptr"))
    return self._checked_cache[i]


Module._checked_entries = _checked_entries


_BUILTIN_TLS = ("threadIdx", "blockIdx", "blockDim", "gridDim")


def _prelude_state(short: str, full: str) -> bool:
    """Whether a thread_local variable is the prelude's own state (threadIdx, the cp.async queues, cooperative
    groups' tile counters), not a __shared__ variable: the built-in variables, `__cudl*` names, and statics of
    functions whose names start with `__` or of the cooperative_groups / nvcuda namespaces."""
    if short in _BUILTIN_TLS or short.startswith("__cudl"):
        return True
    scope = full[:-len(short)] if full.endswith(short) else full  # "__big_tile_sync(unsigned int, ...)::"
    return bool(re.search(r"(?:^|[\s:*&])__\w*\s*\(|\b(?:cooperative_groups|nvcuda)::", scope))


def _elf_symbols(path: Path) -> list[tuple[str, int, int, str, str]]:
    """(TLS or OBJECT, value, bytes, short demangled name, full demangled name) of a kernel library's variables
    (readelf and c++filt, binutils), cached beside the library: libraries are named by content hash."""
    memo = path.with_name(path.name + ".syms.json")
    if memo.is_file():
        return [tuple(x) for x in json.loads(memo.read_text())]
    syms: list[tuple[str, int, int, str, str]] = []
    try:
        out = subprocess.run(["readelf", "-sW", str(path)], capture_output=True, text=True).stdout
        raw = []
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 8 and f[3] in ("TLS", "OBJECT") and f[6] != "UND" and int(f[2], 0) > 0:
                raw.append((f[3], int(f[1], 16), int(f[2], 0), f[7]))
        dem = subprocess.run(["c++filt"], input="\n".join(r[3] for r in raw), capture_output=True,
                             text=True).stdout.splitlines()
        if len(dem) == len(raw):
            syms = [(k, v, n, re.sub(r"<.*>", "", d).split("::")[-1].strip(), d) for (k, v, n, _), d in zip(raw, dem)
                    if not d.startswith(("guard variable", "vtable", "typeinfo", "_")) and "." not in d]
    except OSError:  # no binutils: shared memory and __device__ variables go unchecked, and unpoisoned
        return []
    tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(syms))
    os.replace(tmp, memo)
    return syms


def _library(mod: Module, checked: bool) -> Path:
    return mod._checked_path if checked else mod.path


def _shared_symbols(mod: Module, checked: bool = True) -> list[tuple[str, int, int]]:
    """(name, offset from threadIdx, bytes) of every __shared__ variable of the normal or instrumented library."""
    cache = mod.__dict__.setdefault("_smem_syms", {})
    if getattr(mod, "_checked_path" if checked else "path", None) is None:
        return []
    if checked not in cache:
        tls = [(v, n, s, d) for k, v, n, s, d in _elf_symbols(_library(mod, checked)) if k == "TLS"]
        base = next((v for v, _, s, _ in tls if s == "threadIdx"), None)
        cache[checked] = [] if base is None else [(s, v - base, n) for v, n, s, d in tls if not _prelude_state(s, d)]
    return cache[checked]


def _device_symbols(mod: Module) -> list[tuple[str, int, int]]:
    """(name, offset from the library's load address, bytes) of __device__ / __constant__ variables."""
    return [(s, v, n) for k, v, n, s, _ in _elf_symbols(mod._checked_path) if k == "OBJECT"]


def _checks_begin(mod: Module, mode: int, params: list[Param], args: list[Any], guards: dict[int, Any],
                  shared_mem: int) -> _Checks | None:
    if not mode or getattr(mod, "_checks_broken", None):
        return None
    regions: list[int] = []
    for k, gd in guards.items():
        lo = gd.ptr(args[k])
        regions += [lo, lo + args[k].nbytes, args[k].itemsize, k, 0]
    for j, (_, off, size) in enumerate(_shared_symbols(mod)):
        regions += [off, off + size, 1, 1000 + j, 1]
    if shared_mem:
        regions += [0, int(shared_mem), 1, 999, 2]
    for j, (_, off, size) in enumerate(_device_symbols(mod)):
        regions += [off, off + size, 1, 2000 + j, 3]
    arr = (ctypes.c_longlong * max(1, len(regions)))(*regions)
    C = _Checks()
    C.mode, C.nregions, C.regions = mode, len(regions) // 5, arr
    _KEEP[:] = [C, arr]
    mod.rt.cudl_checks_set.argtypes = [ctypes.c_void_p]
    mod.rt.cudl_checks_set(ctypes.addressof(C))
    mod._last_ck = C
    return C


def _checks_end(mod: Module, ck: _Checks | None, mode: int, L: _Launch, name: str) -> None:
    if ck is not None:
        mod.rt.cudl_checks_set(None)
        if mode & COUNTERS:
            _collect_counts(mod, L, name)
    buf = ctypes.create_string_buffer(1024)
    n = mod.rt.cudl_take_warning(buf, 1024)
    if n and (mod.shown, name) not in _WARNED:
        import warnings

        _WARNED.add((mod.shown, name))
        warnings.warn(f"{buf.raw[:n].decode(errors='replace')} ({name} in {mod.shown})", stacklevel=4)


def _source_lines(path: Path, pcs: list[int], shown: str) -> list[str]:
    """file:line of each code offset (the innermost frame outside the emulator's include/), via addr2line."""
    if not pcs:
        return []
    try:
        out = subprocess.run(["addr2line", "-e", str(path), "-i", "-a", *[hex(pc) for pc in pcs]],
                             capture_output=True, text=True).stdout
    except OSError:
        return ["?"] * len(pcs)
    frames: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("0x"):
            frames.append([])
        elif frames:
            frames[-1].append(line.split(" (discriminator")[0].strip())
    res = []
    for fr in frames:
        pick = next((f for f in fr if not f.startswith("??") and str(INCLUDE) not in f), fr[0] if fr else "?")
        file, _, ln = pick.rpartition(":")
        if file.endswith(shown):
            file = shown
        elif str(INCLUDE) in file:
            file = Path(file).name
        res.append(f"{file}:{ln}")
    return res + ["?"] * (len(pcs) - len(res))


_CTYPE_BYTES = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "double": 8, "__half": 2, "half": 2,
                "__nv_bfloat16": 2, "char": 1, "unsigned char": 1, "bool": 1, "short": 2, "long long": 8,
                "unsigned long long": 8, "float2": 8, "float4": 16, "int2": 8, "int4": 16, "__half2": 4,
                "uint32_t": 4, "int32_t": 4, "uint8_t": 1, "int8_t": 1}


def _decl(source: str, name: str, qualifier: str = "__shared__") -> tuple[int, int]:
    """(element bytes or 0, number of dimensions) of `__shared__ T name[...]` (or another qualifier)."""
    m = re.search(r"(?:" + qualifier + r")\s+(?:__align__\s*\(\s*\w+\s*\)\s*)?([\w\s]+?)\s+" + re.escape(name) +
                  r"\s*((?:\[[^\]]*\]\s*)*)", strip_comments(source))
    if not m:
        return 0, 1
    typ = " ".join(m.group(1).replace("const", "").replace("volatile", "").split())
    return _CTYPE_BYTES.get(typ, 0), m.group(2).count("[")


def _cell_name(mod: Module, C: _Checks, params: list[Param], args: list[Any]) -> str:
    """The element a race-check report is about: `partials[0] (global memory, argument partials)`, `s[3] (shared
    memory)`, ..."""
    src = mod._check_inputs[2]
    if C.region < 999:
        p, a = params[C.region], args[C.region]
        what = f"{p.name}[{C.offset // a.itemsize}] (global memory, argument {p.name})"
    elif C.region >= 2000:
        var = _device_symbols(mod)[C.region - 2000][0]
        size, dims = _decl(src, var, r"__device__|__constant__|__managed__")
        what = (f"{var} (__device__ variable)" if size and not dims else
                f"{var}[{C.offset // size}] (__device__ variable)" if size else
                f"byte {C.offset} of {var} (__device__ variable)")
    else:
        if C.region == 999:
            var, off = "dynamic shared memory (extern __shared__)", C.offset
            m = re.search(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\w+\s*\)\s*)?([\w\s]+?)\s+(\w+)\s*\[\s*\]",
                          strip_comments(src))
            if m:
                var = m.group(2)
        else:
            var, off, _ = _shared_symbols(mod)[C.region - 1000][0], C.offset, 0
        size, dims = _decl(src, var) if C.region != 999 or var[0].isalpha() else (0, 1)
        if size and dims == 0:
            what = f"{var} (shared memory)"
        elif size and dims == 1:
            what = f"{var}[{off // size}] (shared memory)"
        elif size:
            what = f"{var}, element {off // size} in row-major order (shared memory)"
        else:
            what = f"byte {off} of {var} (shared memory)"
    return what


def _who(L: _Launch, t: int, b: int) -> str:
    """thread (x,y,z) of block (x,y,z), from linear indices."""
    bx, by, gx, gy = L.block[0], L.block[1], L.grid[0], L.grid[1]
    return f"thread ({t % bx},{t // bx % by},{t // (bx * by)}) of block ({b % gx},{b // gx % gy},{b // (gx * gy)})"


def _uninit_message(mod: Module, L: _Launch, name: str, params: list[Param], args: list[Any]) -> str:
    C = mod._last_ck
    what = _cell_name(mod, C, params, args)
    line = _source_lines(mod._checked_path, [C.pc[1]], mod.shown)[0]
    how = "atomic operation (it reads the old value)" if C.atomic[1] else "read"
    return (f"read of uninitialized shared memory: {what}, {how} by {_who(L, C.tid[1], C.blk[1])} at {line}, "
            "which no thread of the block has written since the block started (shared memory is undefined when a "
            "block starts; on a GPU it holds what an earlier block left there: set it, then __syncthreads(), "
            f"before reading it) (initcheck of the CPU emulator's race check), in {name} ({mod.shown})")


def _subscripts(line: str, col: int) -> tuple[str, str, str]:
    """(array name, `name[..][..]` text, "read" or "write") of the subscript whose `[` or `]` is at `col` in a
    line of source (g++ names either): back over the `[...]` groups to the name, forward over the rest, then
    what follows (an assignment: a write)."""
    def match(i: int, step: int) -> int:  # index of the bracket that pairs with the one at i
        depth = 0
        while 0 <= i < len(line):
            depth += {"[": 1, "]": -1}.get(line[i], 0) * step
            if depth == 0:
                return i
            i += step
        return -1

    close = match(col, 1) if 0 <= col < len(line) and line[col] == "[" else col
    start = close
    while 0 <= start < len(line) and line[start] == "]":
        start = match(start, -1) - 1
        while start >= 0 and line[start] == " ":
            start -= 1
    m = re.search(r"[A-Za-z_]\w*$", line[:start + 1]) if start >= 0 else None
    if not m:
        return "", "", "access"
    end = close
    while (nxt := re.match(r"\s*\[", line[end + 1:])) and match(end + nxt.end(), 1) > 0:
        end = match(end + nxt.end(), 1)
    after = line[end + 1:].lstrip()
    write = re.match(r"(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--", after) or re.search(r"(?:\+\+|--)\s*$", line[:m.start()])
    return m.group(), line[m.start():end + 1], "write" if write else "read"


def _bounds_message(mod: Module, L: _Launch, who: str, where: str) -> str:
    """An index past a dimension of an array of known size (-fsanitize=bounds), named from the source line and
    column g++ reports (the `]` of the subscript out of range)."""
    atype, index, loc = L.msg.decode(errors="replace").split("\t")
    file, line, col = loc.rsplit(":", 2)
    bound = re.search(r"\[(\d+)\]", atype)
    text = strip_comments(mod._check_inputs[2]) if file == mod.shown else ""
    lines = text.splitlines()
    var, expr, rw = _subscripts(lines[int(line) - 1], int(col) - 1) if 0 < int(line) <= len(lines) else ("", "", "")
    v = re.escape(var)
    decl = (re.search(r"__shared__[^;{}]*\b" + v + r"\s*\[[^;{}]*;", text) or
            re.search(r"(?<=[;{}\n])\s*[A-Za-z_][\w:<>\s]*?\s" + v + r"\s*\[[^;{}=]*[;=]", text)) if var else None
    shared = decl is not None and "__shared__" in decl.group()
    kind = f"{'shared ' if shared else ''}{rw or 'access'}"
    size = f" of size {bound.group(1)}" if bound else ""
    if var:
        d = " ".join(decl.group().rstrip("=").split()) if decl else ""
        declared = (f"{var} is declared `{d}` at {file}:{text.count(chr(10), 0, decl.end()) + 1}" if decl
                    else f"of type {atype}")
        subject = f"{expr}: index {index} is past the end of a dimension{size} ({declared})"
    else:
        subject = f"index {index} is past the end of an array of type {atype}"
    return (f"out-of-bounds {kind}: {subject}, at {file}:{line} by {who} (an undersized array, or a wrong index: "
            f"on a GPU it reads or overwrites another variable) {where}")



def _race_message(mod: Module, L: _Launch, name: str, params: list[Param], args: list[Any]) -> str:
    C = mod._last_ck
    what = _cell_name(mod, C, params, args)
    lines = _source_lines(mod._checked_path, [C.pc[0], C.pc[1]], mod.shown)

    def who(k: int) -> str:
        return _who(L, C.tid[k], C.blk[k])

    def kind(k: int) -> str:
        return "atomic operation" if C.atomic[k] else "write" if C.write[k] else "read"

    if lines[0] == lines[1] and C.write[0] != C.write[1]:
        why = ("a read-modify-write of one element by several threads (+= is a read, then a write): use "
               "atomicAdd, or reduce within the block first")
    elif C.blk[0] != C.blk[1]:
        why = ("two blocks touch the same element without atomics, and nothing orders blocks: use atomicAdd, "
               "or give each block its own elements")
    elif C.tid[0] // 32 == C.tid[1] // 32:
        why = "threads of one warp, with no __syncwarp() or __syncthreads() between the two accesses"
    else:
        why = "no __syncthreads() between the two accesses"
    return (f"data race on {what}: {kind(0)} by {who(0)} at {lines[0]}, then {kind(1)} by {who(1)} at "
            f"{lines[1]}; {why} (race check of the CPU emulator), in {name} ({mod.shown})")


def _collect_counts(mod: Module, L: _Launch, name: str) -> None:
    rt = mod.rt
    rt.cudl_counters_rows.restype = ctypes.c_size_t
    rt.cudl_counters_threads.restype = ctypes.c_size_t
    n = rt.cudl_counters_rows(None, ctypes.c_size_t(0))
    rows = (_Agg * max(1, n))()
    rt.cudl_counters_rows(rows, ctypes.c_size_t(n))
    nt = rt.cudl_counters_threads(None, ctypes.c_size_t(0))
    per_thread = np.zeros(nt, np.uint32)
    if nt:
        rt.cudl_counters_threads(ctypes.c_void_p(per_thread.ctypes.data), ctypes.c_size_t(nt))
    lines = _source_lines(mod._checked_path, [rows[k].pc for k in range(n)], mod.shown)
    _LAST_COUNTS.clear()
    _LAST_COUNTS.update(
        kernel=name, shown=mod.shown, grid=tuple(L.grid), block=tuple(L.block), per_thread=per_thread,
        rows=[dict(line=lines[k], space="shared" if rows[k].kind else "global",
                   op="store" if rows[k].write else "load", requests=rows[k].requests, units=rows[k].units,
                   ideal=rows[k].ideal, lanes=rows[k].lanes) for k in range(n)])


def last_counts() -> dict[str, Any]:
    """Raw counters of the last launch run with COUNTERS (cudl.counters builds its table from them)."""
    return dict(_LAST_COUNTS)
