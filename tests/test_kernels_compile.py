"""Every kernel in kernels_src/ compiles with NVRTC for every GPU generation the book supports (no GPU needed).

Template kernels are instantiated with every name expression the book uses (`cudl.load(path, "name<T>")`).
"""

from __future__ import annotations

import re

import pytest

from cudl.compile import ARCHS, KERNELS_DIR, ROOT, nvrtc_compile, resolve

pytest.importorskip("cuda.bindings")

KERNELS = sorted(p.relative_to(KERNELS_DIR).as_posix() for p in KERNELS_DIR.rglob("*.cu"))
_LOAD = re.compile(r"""load\(\s*["']([\w./-]+\.cu)["']\s*,\s*["']([^"']+<[^"']+>)["']""")


def name_expressions() -> dict[str, set[str]]:
    """Template instances named anywhere in chapters, solutions and tests."""
    found: dict[str, set[str]] = {}
    for f in [*ROOT.glob("chapters/*.md"), *ROOT.glob("solutions/*.md"), *ROOT.glob("tests/**/*.py"),
              *ROOT.glob("cudl/grade/*.py")]:
        for path, expr in _LOAD.findall(f.read_text()):
            found.setdefault(path, set()).add(expr)
    return found


def test_there_are_kernels():
    assert KERNELS, "kernels_src/ holds no .cu files"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("path", KERNELS)
def test_compiles(path, arch):
    src, shown = resolve(path)
    nvrtc_compile(src, shown, arch, name_expressions=tuple(sorted(name_expressions().get(path, ()))))
