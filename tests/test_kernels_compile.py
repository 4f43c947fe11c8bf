"""Every kernel in kernels_src/ compiles with NVRTC for every GPU generation the book supports (no GPU needed).

Template kernels are instantiated with every name expression the book uses (`cudl.load(path, "name<T>")`).
"""

from __future__ import annotations

import re

import pytest

from cudl.compile import ARCHS, KERNELS_DIR, ROOT, nvrtc_compile, resolve

pytest.importorskip("cuda.bindings")

# kernels_src/appendix/ holds standalone nvcc programs (host code, main): test_appendix_programs
KERNELS = sorted(p.relative_to(KERNELS_DIR).as_posix() for p in KERNELS_DIR.rglob("*.cu")
                 if p.relative_to(KERNELS_DIR).parts[0] != "appendix")
APPENDIX = sorted(KERNELS_DIR.glob("appendix/*.cu"))
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


@pytest.mark.parametrize("path", APPENDIX, ids=lambda p: p.name)
def test_appendix_programs(path, tmp_path):
    """The standalone programs of the appendix page compile with nvcc (skipped without the toolkit)."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc (CUDA toolkit) not installed")
    proc = subprocess.run([nvcc, "-arch=sm_75", "-o", str(tmp_path / "a.out"), str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
