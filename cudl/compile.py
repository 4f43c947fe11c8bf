"""Kernel sources: where they live, what their parameters are, and readable compile errors.

Shared by both backends: the GPU loader (CuPy/NVRTC), the CPU emulator (g++) and the
compile test that runs NVRTC without a GPU through `cuda-bindings`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

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


def with_line_directive(source: str, shown: str) -> str:
    """Prefix `#line` so that compilers report errors against the reader's file and line."""
    return f'#line 1 "{shown}"\n{source}'


# ---------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class Param:
    """One kernel parameter: `const float* __restrict__ x` -> Param('x', 'const float*', True, 'float')."""

    name: str
    ctype: str
    is_pointer: bool
    base: str  # the pointee type for pointers, the type itself otherwise


def strip_comments(source: str) -> str:
    """Blank out // and /* */ comments with spaces: every offset of the source stays valid (strings are not parsed)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group()), source, flags=re.S)


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
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


_LB = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"  # may stand before or after `void`
KERNEL_DECL = re.compile(rf"__global__\s+{_LB}void\s+{_LB}(\w+)\s*\(")  # group 1: the kernel's name


def kernel_names(source: str) -> list[str]:
    """Names of all `__global__` functions in a source, in order."""
    return [m.group(1) for m in KERNEL_DECL.finditer(strip_comments(source))]


def parse_params(source: str, name: str) -> list[Param]:
    """Parameters of kernel `name` (`vector_add` or a template instance `gelu<__half>`)."""
    base_name, _, targs = name.partition("<")
    text = strip_comments(source)
    pat = re.compile(
        r"((?:template\s*<(?P<tparams>[^{};]*?)>\s*)?)"
        r"(?:extern\s+\"C\"\s+)?(?:static\s+)?__global__\s+"
        rf"{_LB}void\s+{_LB}{re.escape(base_name)}\s*\("
    )
    m = pat.search(text)
    if not m:
        found = ", ".join(kernel_names(source)) or "none"
        raise CompileError(f"no __global__ kernel named {base_name!r} in the source (kernels found: {found})")
    close = _matching(text, m.end() - 1, "(", ")")
    raw = text[m.end() : close]
    subst: dict[str, str] = {}
    if targs and m.group("tparams"):
        tnames = [re.findall(r"\w+", p)[-1] for p in _split_top(m.group("tparams"))]
        for tname, value in zip(tnames, _split_top(targs.rstrip().removesuffix(">"))):
            subst[tname] = value
    params = []
    for decl in _split_top(" ".join(raw.split())):
        if not decl or decl == "void":
            continue
        decl = decl.split("=")[0].strip()
        pname = re.findall(r"\w+", decl)[-1]
        ctype = decl[: decl.rfind(pname)].replace("__restrict__", "").strip()
        for tname, value in subst.items():
            ctype = re.sub(rf"\b{re.escape(tname)}\b", value, ctype)
        ctype = " ".join(ctype.replace("*", " * ").split()).replace(" *", "*")
        is_pointer = ctype.endswith("*")
        base = ctype.rstrip("*").replace("const", "").replace("volatile", "").strip()
        params.append(Param(pname, ctype, is_pointer, base))
    return params


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
    return [f"{c}/include" for c in candidates if c and Path(c, "include", "cuda_fp16.h").is_file()][:1]


def nvrtc_compile(source: str, shown: str, arch: str, options: tuple[str, ...] = (),
                  name_expressions: tuple[str, ...] = ()) -> str:
    """Compile to PTX with NVRTC (through cuda-bindings, no GPU needed); raise CompileError on failure."""
    from cuda.bindings import nvrtc

    text = with_line_directive(source, shown).encode()
    err, prog = nvrtc.nvrtcCreateProgram(text, shown.encode(), 0, [], [])
    try:
        for expr in name_expressions:
            nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        opts = [f"-arch=compute_{arch.split('_')[1]}", "-std=c++17", *options]
        opts += [f"-I{d}" for d in cuda_include_dirs()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{shown} does not compile for {arch}:\n" + format_log(log_text, source, shown))
        return log_text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
