"""`cudl.sass`: the machine code (SASS) the GPU runs for one kernel, to back claims about instructions.

    from cudl.sass import access_widths, sass
    listing = sass("05-matmul/matmul_6_vectorized.cu", "matmul_6_vectorized")
    access_widths(listing)   # {"LDS": {128: 32}, "LDG": {32: 8, 128: 2}, ...}

The kernel is compiled with NVRTC for this GPU's architecture (the compiler and options cudl.load uses
through CuPy) into a cubin, which `cuobjdump -sass` disassembles. Where that cannot happen (the CPU
emulator, no CUDA toolkit) it prints one sentence and returns None.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .backend import on_gpu
from .compile import _nvrtc, resolve


def _cubin(source: str, shown: str, arch: str, options: Sequence[str]) -> bytes:
    # the NVRTC compile that cudl.compile does (its include path, its errors with the .cu line)
    return _nvrtc(source, shown, [f"-arch={arch}", "-std=c++17", *options], (), "cubin", f"for {arch}")[1]


def sass(file_or_source: str, kernel: str, *, options: Sequence[str] = ()) -> str | None:
    """SASS of `kernel` (an extern "C" name) compiled for this GPU; None, with a sentence, where unavailable."""
    if not on_gpu():
        print("cudl.sass: skipped on the CPU emulator: SASS is the machine code of a real GPU; the stored "
              "outputs show it for the GPU named at the top of the page.")
        return None
    tool = shutil.which("cuobjdump") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/cuobjdump"),) if p.is_file()), None)
    if tool is None:
        print("cudl.sass: `cuobjdump` (CUDA toolkit) is not installed here; the stored outputs show the SASS "
              "for the GPU named at the top of the page.")
        return None
    from .env import device_info

    arch = "sm_" + str(device_info()["cc"]).replace(".", "")
    source, shown = resolve(file_or_source)
    try:
        cubin = _cubin(source, shown, arch, options)
    except ImportError:
        print("cudl.sass: needs NVRTC's Python bindings (pip install cuda-bindings); skipped.")
        return None
    with tempfile.TemporaryDirectory(prefix="cudl-sass-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        proc = subprocess.run([tool, "-sass", "-fun", kernel, str(path)], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        print(f"cudl.sass: cuobjdump found no SASS for {kernel}: {proc.stderr.strip()[:200]}")
        return None
    return proc.stdout


_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def opcodes(text: str) -> list[str]:
    """The opcodes of a cuobjdump/nvdisasm listing, in order (`LDS.128`, `FFMA`, ...), predicates dropped."""
    return _INSTRUCTION.findall(text)


def access_widths(text: str, kinds: Sequence[str] = ("LDG", "STG", "LDS", "STS")) -> dict[str, dict[int, int]]:
    """Memory instructions of a listing by kind and width in bits: {"LDS": {32: 16, 128: 4}, ...}.

    A `.64` or `.128` suffix gives the width; otherwise 32 bits (the book's kernels move floats).
    """
    out: dict[str, dict[int, int]] = {k: {} for k in kinds}
    for op in opcodes(text):
        kind = op.split(".")[0]
        if kind in out:
            parts = op.split(".")
            width = 128 if "128" in parts else 64 if "64" in parts else 32
            out[kind][width] = out[kind].get(width, 0) + 1
    return out
