"""Every kernel file in kernels_src/ compiles for the CPU emulator (or is refused with EmulatorUnsupported).

The same instances as tests/test_kernels_compile.py (NVRTC) are built, so a prelude gap shows up here
before a chapter notebook hits it.
"""

from __future__ import annotations

import re

import pytest

import cudl
from cudl.compile import KERNELS_DIR, ROOT, resolve

pytestmark = pytest.mark.skipif(cudl.on_gpu(), reason="the GPU build is tests/test_kernels_compile.py")

# kernels_src/appendix/ holds standalone nvcc programs (host code, main), not kernels for cudl.load.
KERNELS = sorted(p.relative_to(KERNELS_DIR).as_posix() for p in KERNELS_DIR.rglob("*.cu")
                 if p.relative_to(KERNELS_DIR).parts[0] != "appendix")
_LOAD = re.compile(r"""load\(\s*["']([\w./-]+\.cu)["']\s*,\s*["']([^"']+<[^"']+>)["']""")


def name_expressions() -> dict[str, set[str]]:
    """Template instances named anywhere in chapters, solutions, tests and graders (as test_kernels_compile)."""
    found: dict[str, set[str]] = {}
    for f in [*ROOT.glob("chapters/*.md"), *ROOT.glob("solutions/*.md"), *ROOT.glob("tests/**/*.py"),
              *ROOT.glob("cudl/grade/*.py")]:
        for path, expr in _LOAD.findall(f.read_text()):
            found.setdefault(path, set()).add(expr)
    return found


@pytest.mark.parametrize("path", KERNELS)
def test_compiles_for_emulator(path):
    from cudl.emulator import compile_module

    src, shown = resolve(path)
    try:
        compile_module(src, shown, (), tuple(sorted(name_expressions().get(path, ()))))
    except cudl.EmulatorUnsupported as exc:
        pytest.skip(str(exc))
