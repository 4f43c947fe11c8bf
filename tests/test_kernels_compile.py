"""Every kernel in kernels_src/ compiles with NVRTC for every GPU generation the book supports (no GPU needed).

Template kernels are instantiated with every name expression the book uses (`cudl.load(path, "name<T>")`).
Colab's CuPy compiles with CUDA 12.x while cuda-bindings here is NVRTC 13, so every kernel (and every graded
solution) is also compiled to an sm_75 (T4) cubin with NVRTC 12, through tests/nvrtc12.py.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest

from cudl.compile import ARCHS, KERNELS_DIR, ROOT, nvrtc_compile, resolve
from cudl.errors import CompileError
from cudl.grade.extract import graded_sources

sys.path.insert(0, str(Path(__file__).parent))
import nvrtc12  # noqa: E402

pytest.importorskip("cuda.bindings")

SOLUTIONS = [(f"{nb.stem}/{c.grader}", c.source) for nb in sorted((ROOT / "solutions").glob("*.ipynb"))
             for c in graded_sources(nb)]
# kernels_src/appendix/ holds standalone nvcc programs (host code, main): test_appendix_programs
KERNELS = sorted(p.relative_to(KERNELS_DIR).as_posix() for p in KERNELS_DIR.rglob("*.cu")
                 if p.relative_to(KERNELS_DIR).parts[0] != "appendix")
APPENDIX = sorted(KERNELS_DIR.glob("appendix/*.cu"))
_LOAD = re.compile(r"""load\(\s*["']([\w./-]+\.cu)["']\s*,\s*["']([^"']+<[^"']+>)["']""")


@functools.cache  # read once, not by each of the ~500 compile tests
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


def test_compile_leaves_the_interpreter_intact():
    """NVRTC writes its log and binary into buffers cudl hands it, never into a shared bytes object: b" " * 1 is
    CPython's one b" ", which an empty log's NUL once overwrote, and from then on every b" " of the process was
    b"\\0" (Python 3.12's parser dropped the blank of f"{a} {b}" in every later notebook cell)."""
    src, shown = resolve("01-first-kernel/vector_add.cu")
    nvrtc_compile(src, shown, ARCHS[0])  # a kernel without warnings: its log is the NUL alone
    shared = b"a b"[1:2]  # CPython's one b" " (any one-byte bytes is that object): its byte, as an int
    assert shared[0] == 32, f"the interpreter's shared b' ' now holds {shared!r}"
    assert eval('f"{a} {b}"', {"a": 1, "b": 2}) == "1 2"  # what the b" " broke in Python 3.12's parser


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


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name,source", SOLUTIONS, ids=[n for n, _ in SOLUTIONS])
def test_solution_compiles(name, source, arch):
    nvrtc_compile(source, name, arch)


needs_nvrtc12 = pytest.mark.skipif(nvrtc12.library() is None, reason="pip install nvidia-cuda-nvrtc-cu12 "
                                   "nvidia-cuda-runtime-cu12 (requirements.txt) to compile as Colab does")


@needs_nvrtc12
def test_nvrtc12_is_cuda_12():
    assert nvrtc12.version()[0] == 12 and nvrtc12.include_dir(), nvrtc12.version()


@needs_nvrtc12
@pytest.mark.parametrize("path", KERNELS)
def test_compiles_with_nvrtc12_for_t4(path):
    src, shown = resolve(path)
    try:
        nvrtc12.compile_cubin(src, shown, "sm_75",
                              name_expressions=tuple(sorted(name_expressions().get(path, ()))))
    except CompileError as exc:  # the pip wheel's mma.h includes crt/mma.h, which no CUDA 12 wheel ships
        if 'cannot open source file "crt/' in str(exc):
            pytest.skip("nvidia-cuda-runtime-cu12 lacks crt/ headers (Colab's CUDA toolkit has them)")
        raise


@needs_nvrtc12
@pytest.mark.parametrize("name,source", SOLUTIONS, ids=[n for n, _ in SOLUTIONS])
def test_solution_compiles_with_nvrtc12_for_t4(name, source):
    try:
        nvrtc12.compile_cubin(source, name, "sm_75")
    except CompileError as exc:  # WMMA solutions include mma.h: the same missing crt/ headers as above
        if 'cannot open source file "crt/' in str(exc):
            pytest.skip("nvidia-cuda-runtime-cu12 lacks crt/ headers (Colab's CUDA toolkit has them)")
        raise


@needs_nvrtc12
def test_nvrtc12_reports_errors():
    with pytest.raises(Exception, match="NVRTC 12 for sm_75"):
        nvrtc12.compile_cubin('extern "C" __global__ void k() { undefined_call(); }', "bad.cu")


def test_driver_older_than_cupy_is_diagnosed():
    """cudl.setup() prints one sentence saying what to do when the driver is older than CuPy's CUDA."""
    from cudl.env import driver_problem

    gpu = dict(backend="gpu", driver="12.4", runtime="12.4", nvrtc="12.4", kernel_format="cubin")
    assert driver_problem(gpu) == ""
    assert driver_problem({**gpu, "nvrtc": "12.9"}) == ""  # cubins of a newer 12.x load on a 12.4 driver
    ptx = driver_problem({**gpu, "nvrtc": "12.9", "kernel_format": "PTX"})
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in ptx and "CUPY_COMPILE_WITH_PTX" in ptx
    major = driver_problem({**gpu, "runtime": "13.0", "nvrtc": "13.0"})
    assert "pip install cupy-cuda12x" in major, major
    assert driver_problem(dict(backend="emulator")) == ""
