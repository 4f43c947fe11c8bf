"""Kernel sources: where they live, what their parameters are, and readable compile errors.

Shared by both backends: the GPU loader (CuPy/NVRTC), the CPU emulator (g++) and the
compile test that runs NVRTC without a GPU through `cuda-bindings`.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import importlib.util
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .errors import CompileError

ROOT = Path(__file__).resolve().parents[1]
KERNELS_DIR = ROOT / "kernels_src"

# The GPUs this book promises to run on: T4 (Colab), A100, L4/RTX 4090, H100.
ARCHS = ("sm_75", "sm_80", "sm_89", "sm_90")


def resolve(file_or_source: str) -> tuple[str, str]:
    """Return (source text, name shown in errors) for a path under kernels_src/ or raw source."""
    if "\n" in file_or_source or "__global__" in file_or_source:
        return file_or_source, "<kernel source>"
    for candidate in (KERNELS_DIR / file_or_source, Path(file_or_source)):
        if candidate.is_file():
            try:
                shown = candidate.resolve().relative_to(ROOT).as_posix()
            except ValueError:
                shown = str(candidate)
            return candidate.read_text(), shown
    raise FileNotFoundError(
        f"no kernel file {file_or_source!r}: give a path under {KERNELS_DIR} "
        "(e.g. '01-first-kernel/vector_add.cu') or the CUDA source itself"
    )


def kernels_module(path: str) -> ModuleType:
    """Import a chapter's Python module under kernels_src/ by its path ("12-flash-attention/flash.py": the
    chapter's launchers), once, under its stem ("flash"): the notebook, the tests, the chapter's gpu_check.py
    and the graders then share one copy of it (and `import flash` with its folder on sys.path finds it too)."""
    file = (KERNELS_DIR / path).resolve()
    if not file.is_file() or file.suffix != ".py":
        raise FileNotFoundError(f"no Python module {path!r} under {KERNELS_DIR}")
    mod = sys.modules.get(file.stem)
    if mod is not None:
        if Path(getattr(mod, "__file__", None) or "").resolve() != file:  # another module of that name
            raise ImportError(f"{path}: a module named {file.stem!r} is already imported from {mod.__file__}")
        return mod
    spec = importlib.util.spec_from_file_location(file.stem, file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = mod  # before running it, as `import` does
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[file.stem]
        raise
    return mod


# `#include "NN-slug/file.cuh"`: a header shared by kernels, found under kernels_src/ by every compiler.
_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


# The headers the CPU emulator provides for CUDA's own (cuda_fp16.h, mma.h, cooperative_groups/reduce.h, ...).
_SHIM_DIR = Path(__file__).resolve().parent / "emulator" / "include"
_EMULATOR_SHIMS = frozenset(p.relative_to(_SHIM_DIR).as_posix() for p in _SHIM_DIR.rglob("*")
                            if p.is_file() and not p.name.startswith("cudl_"))


def toolkit_header(name: str) -> bool:
    """Whether `#include "name"` names a CUDA toolkit header (one the emulator provides, or one found in the
    local toolkit's include folder): compilers find those on their include path, as NVRTC does."""
    return name in _EMULATOR_SHIMS or any(Path(d, name).is_file() for d in cuda_include_dirs())


def local_includes(source: str, shown: str, root: Path | None = None) -> list[tuple[str, Path]]:
    """The files a source pulls in with `#include "..."`, recursively, in first-seen order: (name, path).

    A quoted path is relative to kernels_src/ (`root`), or, inside a header, to that header's folder first,
    as C compilers search; then a CUDA toolkit header (`"cuda_fp16.h"`), which is not a local file and is
    not listed; a missing one raises CompileError naming it and the line that wants it.
    """
    root = KERNELS_DIR if root is None else root
    found: dict[str, Path] = {}

    def visit(text: str, where: str, folder: Path | None) -> None:
        text = strip_comments(text)
        for m in _LOCAL_INCLUDE.finditer(text):
            want = m.group(1)
            cands = ([folder / want] if folder else []) + [root / want]
            path = next((c for c in cands if c.is_file()), None)
            if path is None and toolkit_header(want):
                continue  # NVRTC (-I toolkit), nvcc and the emulator's g++ (-I its shims) find it there
            if path is None:
                line = text.count("\n", 0, m.start()) + 1
                raise CompileError(f'{where}:{line}: #include "{want}": no file {want} under {root} (a quoted '
                                   "#include names a header by its path under kernels_src/, e.g. "
                                   '"11-tensor-cores/tc_ptx.cuh")')
            path = path.resolve()
            try:
                name = path.relative_to(root.resolve()).as_posix()
            except ValueError:
                raise CompileError(f'{where}: #include "{want}" is outside {root}: shared headers live '
                                   "under kernels_src/") from None
            if name not in found:
                found[name] = path
                visit(path.read_text(), name, path.parent)

    visit(source, shown, None)
    return list(found.items())


def includes_digest(source: str, shown: str, root: Path | None = None) -> str:
    """A hash of every file the source includes (quoted #include, recursively); "" when there are none."""
    h = hashlib.sha256()
    files = local_includes(source, shown, root)
    for name, path in files:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16] if files else ""


# Options of every NVRTC compile besides the caller's. NVRTC compiles device code only, so a function without
# __device__ can only be meant for the GPU: -default-device says so. Without it NVRTC 12 (Colab's CUDA) takes the
# call operator of a generic lambda inside a kernel template for a host function and refuses the instantiation
# (chapter 7's fused_rows_pipelined.cu); NVRTC 13 accepts it either way.
NVRTC_OPTIONS = ("-default-device",)


def include_options() -> list[str]:
    """-I options of every NVRTC compile: kernels_src/ (shared headers), then a CUDA toolkit's headers."""
    return [f"-I{KERNELS_DIR}", *(f"-I{d}" for d in cuda_include_dirs())]


def with_line_directive(source: str, shown: str) -> str:
    """Prefix `#line` so that compilers report errors against the reader's file and line."""
    return f'#line 1 "{shown}"\n{source}'


# ---------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class Param:
    """One kernel parameter: `const float* __restrict__ x` -> Param('x', 'const float*', True, 'float', True)."""

    name: str
    ctype: str
    is_pointer: bool
    base: str  # the pointee type for pointers, the type itself otherwise (typedefs resolved)
    const: bool = False  # a pointer to const: the kernel only reads through it


def strip_comments(source: str) -> str:
    """Blank out // and /* */ comments with spaces: every offset of the source stays valid (strings are not parsed)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group()), source, flags=re.S)


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def _matching(text: str, start: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise CompileError(f"unbalanced {open_ch}{close_ch} in kernel source")


# Macros every CUDA compiler defines; the emulator's prelude defines the same (cudl_prelude.h).
CUDA_DEFINES = ("-D__CUDACC__=1", "-D__CUDA_ARCH__=800", "-D__CUDACC_VER_MAJOR__=12")


def define_flags(options: tuple[str, ...] | list[str]) -> list[str]:
    """NVRTC options that matter to a C preprocessor: -D, -U and -I (others, like --use_fast_math, are not)."""
    out, it = [], iter(options)
    long = {"--define-macro": "-D", "--undefine-macro": "-U", "--include-path": "-I"}
    for o in it:
        if o in ("-D", "-U", "-I") or o in long:
            out.append(long.get(o, o) + next(it, ""))
        elif o.startswith(("-D", "-U", "-I")):
            out.append(o)
        elif o.split("=", 1)[0] in long:
            out.append(long[o.split("=", 1)[0]] + o.split("=", 1)[1])
    return out


@functools.lru_cache(maxsize=256)
def preprocess(source: str, options: tuple[str, ...] = (), emulator: bool = False) -> str:
    """The source as a compiler reads it: comments gone, inactive `#if` branches blank, macros expanded.

    Runs `g++ -E` (or $CXX) with the -D/-U options and CUDA's predefined macros; `#include` lines are
    skipped (a header declares no kernel of this file). Every line keeps its number. Without a C++
    compiler it returns the source with comments blanked out.
    """
    text = re.sub(r"^[ \t]*#[ \t]*include\b[^\n]*", "", strip_comments(source), flags=re.M)
    defines = [*CUDA_DEFINES, *(["-D__CUDL_EMULATOR__=1"] if emulator else []),
               *(f for f in define_flags(options) if not f.startswith("-I"))]
    try:
        proc = subprocess.run([os.environ.get("CXX", "g++"), "-x", "c++", "-std=c++17", "-E", *defines,
                               "-o", "-", "-"], input=text, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return text
    if proc.returncode != 0:
        return text
    lines = [""] * (text.count("\n") + 1)
    line, mine = 1, False
    for out in proc.stdout.splitlines():
        m = re.match(r'#\s*(\d+)\s+"([^"]*)"', out)
        if m:
            line, mine = int(m.group(1)), m.group(2) == "<stdin>"
        elif mine:
            if line <= len(lines):
                lines[line - 1] += out
            line += 1
    return "\n".join(lines)


@dataclass(frozen=True)
class KernelDecl:
    """A `__global__` function found in preprocessed text."""

    name: str  # qualified by its namespaces: `ns::k`
    template: str | None  # the template parameter list, or None
    params: str  # the text between the parentheses
    at_file_scope: bool  # only inside namespaces / extern "C" blocks (not a class or function)


_SKIP_PARENS = re.compile(r"\b(?:__launch_bounds__|__attribute__|__maxnreg__|__align__|alignas|__declspec)\s*\(")


def kernel_decls(text: str) -> list[KernelDecl]:
    """Every `__global__` function of preprocessed text, in order (declarations and definitions)."""
    scopes: list[str | None] = []  # per open brace: a namespace name ("" anonymous), or None
    decls, i, pending_ns = [], 0, None
    tokens = re.compile(r'"(?:\\.|[^"\\])*"|\bnamespace\s+(\w*)\s*(?=\{)|\bextern\s+"C"\s*(?=\{)|'
                        r"\b__global__\b|[{};]")
    while True:
        m = tokens.search(text, i)
        if not m:
            return decls
        i = m.end()
        tok = m.group()
        if tok.startswith("namespace"):
            pending_ns = m.group(1)
        elif tok.startswith("extern"):
            pending_ns = "extern C"
        elif tok == "{":
            scopes.append(pending_ns)
            pending_ns = None
        elif tok == "}":
            if scopes:
                scopes.pop()
        elif tok == ";":
            pending_ns = None
        elif tok == "__global__":
            d = _kernel_at(text, m.start(), i, scopes)
            if d:
                decls.append(d)


def _kernel_at(text: str, start: int, pos: int, scopes: list[str | None]) -> KernelDecl | None:
    # The name is the first identifier followed by `(` that is not an attribute.
    while True:
        m = re.compile(r"[\w:]+\s*\(|[;{}]").search(text, pos)
        if not m or m.group() in ";{}":
            return None
        if _SKIP_PARENS.match(text, m.start()):
            pos = _matching(text, m.end() - 1, "(", ")") + 1
            continue
        break
    name = m.group()[:-1].strip()
    close = _matching(text, m.end() - 1, "(", ")")
    head = text[max(0, text.rfind(";", 0, start), text.rfind("}", 0, start), text.rfind("{", 0, start)):start]
    tm = re.search(r"template\s*<(.*)>\s*(?:extern\s+\"C\"\s*)?(?:static\s+)?$", head, re.S)
    ns = "::".join(s for s in scopes if s and s != "extern C")
    return KernelDecl(f"{ns}::{name}" if ns else name, tm.group(1) if tm else None, text[m.end():close],
                      all(s is not None for s in scopes))


def kernel_names(source: str, options: tuple[str, ...] = ()) -> list[str]:
    """Names of the `__global__` functions a compiler sees in a source, in order."""
    return list(dict.fromkeys(d.name for d in kernel_decls(preprocess(source, tuple(options)))))


def typedefs(text: str) -> dict[str, str]:
    """`typedef T name;` and `using name = T;` of preprocessed text: name -> T (pointers and arrays kept)."""
    out = {}
    for m in re.finditer(r"\btypedef\s+([^;{}()]+?)\s*\b(\w+)\s*;", text):
        out[m.group(2)] = m.group(1)
    for m in re.finditer(r"\busing\s+(\w+)\s*=\s*([^;{}()]+?)\s*;", text):
        out[m.group(1)] = m.group(2)
    return out


_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "__grid_constant__", "struct", "class", "enum",
               "typename", "register"}


_ATTRIBUTE = re.compile(r"\b(?:__attribute__|__align__|alignas|__declspec)\s*\((?:[^()]|\([^()]*\))*\)")


def _param(decl: str, subst: dict[str, str], tdefs: dict[str, str]) -> Param:
    decl = _ATTRIBUTE.sub(" ", decl).split("=")[0].strip()
    arrays = re.findall(r"\[[^\]]*\]", decl)
    decl = re.sub(r"\[[^\]]*\]", "", decl)
    words = re.findall(r"[\w:]+|\*|&", decl)
    pname = words[-1] if len(words) > 1 and re.match(r"\w+$", words[-1]) else ""
    typ = [w for w in (words[:-1] if pname else words) if w not in _QUALIFIERS]
    for _ in range(8):  # template arguments, then typedefs (which may name typedefs)
        typ2 = []
        for w in typ:
            repl = subst.get(w, tdefs.get(w))
            typ2 += re.findall(r"[\w:]+|\*|&", repl) if repl else [w]
        typ2 = [w for w in typ2 if w not in _QUALIFIERS]
        if typ2 == typ:
            break
        typ = typ2
    typ += ["*"] * len(arrays)
    stars = [k for k, w in enumerate(typ) if w == "*"]
    is_pointer = bool(stars)
    pointee = typ[: stars[0]] if stars else typ
    while typ and typ[-1] in ("const", "volatile"):  # `T *const p`: the pointer itself is const
        typ = typ[:-1]
    base = " ".join(w for w in pointee if w not in ("const", "volatile"))
    ctype = " ".join(typ).replace(" *", "*")
    return Param(pname, ctype, is_pointer, base, is_pointer and "const" in pointee and len(stars) == 1)


def parse_params(source: str, name: str, options: tuple[str, ...] = (), emulator: bool = False) -> list[Param]:
    """Parameters of kernel `name` (`vector_add`, `ns::k` or a template instance `gelu<__half>`), read
    from the preprocessed source (the same -D options the compiler gets)."""
    base_name, _, targs = name.partition("<")
    text = preprocess(source, tuple(options), emulator)
    decls = [d for d in kernel_decls(text)
             if base_name.strip() in (d.name, d.name.split("::")[-1]) and (d.template is None) == (not targs)]
    if not decls:
        if any(d.template and base_name.strip() in (d.name, d.name.split("::")[-1]) for d in kernel_decls(text)):
            raise CompileError(f"{base_name} is a template kernel: name an instance, e.g. '{base_name}<float>'")
        found = ", ".join(kernel_names(source, tuple(options))) or "none"
        raise CompileError(f"no __global__ kernel named {base_name!r} in the source (kernels found: {found})")
    d = decls[-1]
    subst: dict[str, str] = {}
    if targs and d.template:
        tnames = [re.findall(r"\w+", p.split("=")[0])[-1] for p in _split_top(d.template)]
        subst = dict(zip(tnames, _split_top(targs.rstrip().removesuffix(">"))))
    tdefs = typedefs(text)
    return [_param(p, subst, tdefs) for p in _split_top(" ".join(d.params.split())) if p and p != "void"]


@dataclass(frozen=True)
class GlobalVar:
    """A `__constant__` or `__device__` variable at file scope: `__constant__ float w[5][5]` ->
    GlobalVar('w', 'float', (5, 5)); `shape` is None where a dimension is not a plain number."""

    name: str
    base: str
    shape: tuple[int, ...] | None


def _outside_braces(text: str) -> list[tuple[int, bool]]:
    """(offset, whether what follows is inside no braces but `extern "C" { }`) at every brace of a text."""
    marks, stack = [(0, True)], []
    for m in re.finditer(r'"(?:\\.|[^"\\])*"|\bextern\s+"C"\s*\{|[{}]', text):
        if m.group().startswith('"'):
            continue
        if m.group() == "}":
            if stack:
                stack.pop()
        else:
            stack.append(m.group() != "{")  # True: an extern "C" block
        marks.append((m.end(), all(stack)))
    return marks


def global_vars(source: str, options: tuple[str, ...] = (), emulator: bool = False) -> dict[str, GlobalVar]:
    """The `__constant__` and `__device__` variables (not functions) a compiler sees at file scope of a source
    (not in a namespace, nor `static` in a function: the emulator names each in an accessor)."""
    text = preprocess(source, tuple(options), emulator)
    tdefs = typedefs(text)
    scope = _outside_braces(text)
    out = {}
    for m in re.finditer(r"(?:(?<=[;{}])|^)\s*((?:\w+\s+)*?(?:__constant__|__device__)\b[^;{}()=]*?)\b(\w+)\s*"
                         r"((?:\[[^\]]*\])*)\s*(?:=[^;]*)?;", text):
        words = m.group(1).split()
        if {"extern", "__shared__", "template"} & set(words):
            continue
        if not scope[bisect.bisect_right(scope, (m.start(2), True)) - 1][1]:
            continue
        dims = re.findall(r"\[([^\]]*)\]", m.group(3))
        ok = all(re.fullmatch(r"[\d\s+\-*/()uUlL]+", d) for d in dims)
        shape = tuple(int(eval(re.sub(r"[uUlL]", "", d).replace("/", "//"))) for d in dims) if ok else None
        base = _param(" ".join(w for w in words if not w.startswith("__") and w != "static") + " x", {},
                      tdefs).base
        out[m.group(2)] = GlobalVar(m.group(2), base, shape)
    return out


# ---------------------------------------------------------------------------- compile logs

_LOG_LINE = re.compile(r"^(?P<file>[^\s(:][^(:]*?)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::\d+)?):\s*(?P<msg>.*)$")


def format_log(log: str, source: str, shown: str, context: int = 1) -> str:
    """Rewrite a compiler log as `file:line: error: ...` followed by the numbered source lines."""
    lines = source.splitlines()
    out: list[str] = []
    for entry in log.splitlines():
        m = _LOG_LINE.match(entry.strip())
        if not m or not re.search(r"\b(error|warning)\b", m.group("msg")):
            continue
        line_no = int(m.group("l1") or m.group("l2"))
        where = m.group("file") if m.group("file") != shown else shown
        out.append(f"{where}:{line_no}: {m.group('msg')}")
        if where == shown and 1 <= line_no <= len(lines):
            for i in range(max(1, line_no - context), min(len(lines), line_no + context) + 1):
                mark = ">" if i == line_no else " "
                out.append(f"  {mark}{i:4d} | {lines[i - 1]}")
    return "\n".join(out) if out else log.strip()


# ---------------------------------------------------------------------------- NVRTC without a GPU

def cuda_include_dirs() -> list[str]:
    """Directories holding cuda_fp16.h & co., for NVRTC runs outside CuPy."""
    candidates = [os.environ.get("CUDA_PATH", ""), os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    found = [f"{c}/include" for c in candidates if c and Path(c, "include", "cuda_fp16.h").is_file()][:1]
    return found + [f"{d}/cccl" for d in found if Path(d, "cccl").is_dir()]  # CUDA 13 keeps cuda/std there


def _nvrtc(source: str, shown: str, options: list[str], name_expressions: tuple[str, ...], binary: str,
           what: str) -> tuple[str, bytes, dict[str, str]]:
    """NVRTC (through cuda-bindings, no GPU needed): (log, the CUBIN or PTX that `binary` names ("cubin", "ptx")
    or b"" (""), lowered names); CompileError on failure."""
    from .backend import on_gpu

    if on_gpu() and importlib.util.find_spec("torch"):
        # PyTorch first: torch 2.11 imported after NVRTC had run through cuda.bindings failed to parse its
        # own operator schemas ("expected ident but found ')'", seen on an H200). Most likely the shared b" "
        # that the log buffer below overwrote (fixed there); kept until a GPU run shows torch without it.
        import torch  # noqa: F401
    from cuda.bindings import nvrtc

    text = with_line_directive(source, shown).encode()
    err, prog = nvrtc.nvrtcCreateProgram(text, shown.encode(), 0, [], [])
    try:
        for expr in name_expressions:
            nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        opts = [*options, *NVRTC_OPTIONS, *include_options()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        # Output buffers are bytearrays, never `b" " * size` (NVIDIA's samples): CPython keeps one shared bytes
        # object per single byte, so for an empty log (size 1, the terminating NUL) b" " * 1 IS the process's
        # b" ", which NVRTC then overwrites with b"\0". Every later b" " in the process is then a NUL: the
        # parser of Python 3.12 dropped the blanks between f-string fields of every cell compiled after it
        # (f"{a} {b}" == "ab"), and torch failed to parse its operator schemas.
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = bytes(log).rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{shown} does not compile {what}:\n" + format_log(log_text, source, shown)
                               + hints(log_text))
        out, lowered = b"", {}
        if binary:
            get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if binary == "cubin"
                             else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
            _, size = get_size(prog)
            buf = bytearray(size)
            get(prog, buf)
            out = bytes(buf)
            for expr in name_expressions:
                e, low = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
                if e == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                    lowered[expr] = low.decode()
        return log_text, out, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def hints(log: str) -> str:
    """A line that names the cause of errors beginners meet most."""
    m = re.search(r"""(?:identifier "|['‘])(INFINITY|NAN|HUGE_VALF?)(?:" is undefined|['’] was not declared)""", log)
    if m:
        return (f"\nhint: {m.group(1)} is a <math.h> macro that NVRTC does not define: write CUDART_INF_F / "
                "CUDART_NAN_F (#include <math_constants.h>) or __int_as_float(0x7f800000), or pass "
                "options=['-DINFINITY=__int_as_float(0x7f800000)']")
    m = re.search(r'cannot open source file "([^"]+)"', log)
    if m:
        return (f"\nhint: NVRTC compiles device code only: host headers such as <{m.group(1)}> are not "
                "available in a kernel (printf needs no header; CUDA's math functions need none)")
    return ""


def nvrtc_compile(source: str, shown: str, arch: str, options: tuple[str, ...] = (),
                  name_expressions: tuple[str, ...] = ()) -> str:
    """Compile to PTX with NVRTC (through cuda-bindings, no GPU needed); raise CompileError on failure."""
    opts = [f"-arch=compute_{arch.split('_')[1]}", "-std=c++17", *options]
    return _nvrtc(source, shown, opts, name_expressions, "", f"for {arch}")[0]


def cubin_resources(cubin: bytes) -> dict[str, dict[str, int]]:
    """Registers per thread and static shared memory per block of every kernel of a CUBIN (an ELF file:
    section `.text.K` holds the register count in the top byte of sh_info, `.nv.shared.K` has the size)."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, count, strndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    names = secs[strndx][4]
    out: dict[str, dict[str, int]] = {}
    for s in secs:
        name = cubin[names + s[0]:cubin.index(b"\0", names + s[0])].decode()
        if name.startswith(".text."):
            out.setdefault(name[6:], {"shared": 0})["regs"] = s[7] >> 24
        elif name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"):
            out.setdefault(name[11:], {"shared": 0})["shared"] = s[5]
    return out


def nvrtc_resources(source: str, shown: str, arch: str, options: tuple[str, ...] = (),
                    names: tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
    """Compile to CUBIN for `arch` (e.g. sm_80) with NVRTC; registers and static shared memory per kernel,
    under its lowered name and under each of `names` (CompileError when NVRTC rejects the source)."""
    _, cubin, lowered = _nvrtc(source, shown, [f"-arch={arch}", "-std=c++17", *options], names, "cubin",
                               "(NVRTC, the compiler of the GPU path)")
    res = cubin_resources(cubin)
    res.update({n: res[low] for n, low in lowered.items() if low in res})
    return res


def elf_symbols(elf: bytes) -> list[tuple[str, int, int, int, str, int]]:
    """(name, type, value, bytes, section, section flags) of every symbol an ELF64 file (a CUBIN, a shared
    library) defines in its .symtab; type is the ELF's STT_* (1 an object, 2 a function, 6 thread-local)."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    entsize, count, strndx = struct.unpack_from("<HHH", elf, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entsize) for i in range(count)]

    def text(off: int) -> str:
        return elf[off:elf.index(b"\0", off)].decode(errors="replace")

    names = [text(secs[strndx][4] + s[0]) for s in secs]
    out = []
    for s in secs:
        if s[1] != 2:  # SHT_SYMTAB
            continue
        strtab = secs[s[6]][4]
        for off in range(s[4], s[4] + s[5], 24):  # Elf64_Sym: name, info, other, section, value, size
            name, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", elf, off)
            if 0 < shndx < len(secs):  # defined in a section of the file (not undefined, absolute, common)
                out.append((text(strtab + name), info & 0xF, value, size, names[shndx], secs[shndx][2]))
    return out


def cubin_variables(cubin: bytes) -> list[tuple[str, int]]:
    """(name, bytes) of every variable of a CUBIN that lives in global or constant memory: `__device__`,
    `__constant__`, `__managed__` and `static` ones, at file scope or in a function. The compiler's own string
    literals (`$str`, printf's formats) are left out: a kernel cannot write them."""
    return [(name, size) for name, kind, _, size, section, _ in elf_symbols(cubin)
            if kind == 1 and size and section.startswith((".nv.global", ".nv.constant")) and not name.startswith("$")]


@functools.lru_cache(maxsize=64)
def nvrtc_variables(source: str, shown: str, options: tuple[str, ...], arch: str) -> tuple[tuple[str, int], ...]:
    """cubin_variables of a source as NVRTC compiles it for `arch` (e.g. sm_90; an -arch in `options` wins):
    the names a module compiled from it gives cuModuleGetGlobal, and their sizes."""
    opts = ["-std=c++17", *([] if any(o.startswith(("-arch=", "--gpu-architecture=")) for o in options)
                            else [f"-arch={arch}"]), *options]
    _, cubin, _ = _nvrtc(source, shown, opts, (), "cubin", "(NVRTC, to list its variables)")
    return tuple(cubin_variables(cubin))


def ptx_for(source: str, shown: str, arch: str, options: tuple[str, ...] = (),
            names: tuple[str, ...] = ()) -> tuple[bytes, dict[str, str]]:
    """PTX for a virtual architecture (`compute_75`), which the driver compiles for the GPU that loads it (mimic
    mode), and the lowered name of each of `names`. An -arch among `options` is replaced."""
    opts = [f"-arch={arch}", "-std=c++17",
            *(o for o in options if not o.startswith(("-arch", "--gpu-architecture")))]
    _, ptx, lowered = _nvrtc(source, shown, opts, names, "ptx", f"for {arch} (NVRTC)")
    return ptx.rstrip(b"\0"), lowered
