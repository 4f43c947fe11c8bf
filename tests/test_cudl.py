"""Unit tests of cudl that need no GPU."""

from __future__ import annotations

import numpy as np
import pytest

import cudl
from cudl import nbtools
from cudl.bench import Timing
from cudl.ceilings import datasheet
from cudl.check import compare
from cudl.compile import format_log, kernel_names, nvrtc_compile, parse_params, resolve
from cudl.errors import CompileError
from cudl.record import gpu_slug

SRC = """// a comment mentioning __global__ void fake(int x)
template <typename T, int BLOCK>
__global__ void __launch_bounds__(256) gelu(const T* __restrict__ x, T* __restrict__ y, int64_t n) {}

extern "C" __global__ void vector_add(const float* __restrict__ a, const float* b,
                                      float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""


# ------------------------------------------------------------------------------ compile.py

def test_kernel_names_skip_comments():
    assert kernel_names(SRC) == ["gelu", "vector_add"]


def test_parse_params_plain_and_template():
    p = parse_params(SRC, "vector_add")
    assert [(q.name, q.ctype, q.is_pointer, q.base) for q in p] == [
        ("a", "const float*", True, "float"), ("b", "const float*", True, "float"),
        ("out", "float*", True, "float"), ("n", "int", False, "int")]
    g = parse_params(SRC, "gelu<__half, 128>")
    assert [(q.name, q.ctype) for q in g] == [("x", "const __half*"), ("y", "__half*"), ("n", "int64_t")]


def test_parse_params_unknown_kernel_lists_known():
    with pytest.raises(CompileError, match="gelu, vector_add"):
        parse_params(SRC, "saxpy")


def test_resolve_source_and_missing_file():
    assert resolve(SRC) == (SRC, "<kernel source>")
    with pytest.raises(FileNotFoundError, match="kernels_src"):
        resolve("no-such-chapter/none.cu")


def test_kernels_module_imports_a_chapter_module_once(tmp_path, monkeypatch):
    """A chapter's launcher module is one object for every caller (and for `import` by its stem); another module
    of the same name, or a path that is not a Python file, is refused."""
    import sys

    import cudl.compile as comp

    (tmp_path / "99-test").mkdir()
    (tmp_path / "99-test" / "cudl_test_launchers.py").write_text("CALLS = []\n")
    (tmp_path / "99-test" / "kernel.cu").write_text("// not Python\n")
    monkeypatch.setattr(comp, "KERNELS_DIR", tmp_path)
    monkeypatch.delitem(sys.modules, "cudl_test_launchers", raising=False)
    mod = cudl.kernels_module("99-test/cudl_test_launchers.py")
    assert mod.CALLS == [] and cudl.kernels_module("99-test/cudl_test_launchers.py") is mod
    assert sys.modules["cudl_test_launchers"] is mod
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "cudl_test_launchers.py").write_text("")
    with pytest.raises(ImportError, match="already imported"):
        cudl.kernels_module("other/cudl_test_launchers.py")
    for bad in ("99-test/kernel.cu", "99-test/none.py"):
        with pytest.raises(FileNotFoundError, match="no Python module"):
            cudl.kernels_module(bad)


def test_format_log_nvrtc_and_gcc_styles():
    src = "line one\nline two\nline three\n"
    nv = format_log('k.cu(2): error: identifier "x" is undefined\n', src, "k.cu")
    assert nv.splitlines()[0] == 'k.cu:2: error: identifier "x" is undefined'
    assert ">   2 | line two" in nv
    gcc = format_log("k.cu:3:5: error: expected ';' before '}' token\n", src, "k.cu")
    assert gcc.splitlines()[0] == "k.cu:3: error: expected ';' before '}' token"
    assert ">   3 | line three" in gcc


def test_nvrtc_compile_error_points_at_the_line():
    pytest.importorskip("cuda.bindings")
    bad = 'extern "C" __global__ void f(float* x) {\n    x[threadIdx.x] = y;\n}\n'
    with pytest.raises(CompileError) as exc:
        nvrtc_compile(bad, "kernels_src/demo/f.cu", "sm_75")
    text = str(exc.value)
    assert "kernels_src/demo/f.cu:2: error" in text and "x[threadIdx.x] = y;" in text


# ------------------------------------------------------------------------------ check.py

def test_compare_passes_close_and_fails_nan():
    ref = np.random.default_rng().standard_normal(1000)
    assert compare(ref.astype(np.float32), ref).ok
    out = ref.astype(np.float32)
    out[17] = np.nan
    c = compare(out, ref)
    assert not c.ok and c.n_bad == 1 and c.worst_index == (17,)


def test_compare_catches_one_wrong_element_and_shape():
    ref = np.random.default_rng().standard_normal((64, 33))
    out = ref.astype(np.float32)
    out[5, 7] += 0.5
    c = compare(out, ref)
    assert not c.ok and c.worst_index == (5, 7) and "1 of 2112" in str(c)
    assert not compare(np.zeros(10, np.float32), np.zeros(11)).ok


@pytest.mark.parametrize("shape", [(1000,), (37, 29)], ids=["1d", "2d"])
def test_compare_float32_tolerance_is_tight_to_the_last_element(shape):
    """One float32 element 3x over the tolerance, in the last place where a check that looks at part of the
    array, or at 100x the tolerance, would miss it; at 0.3x the tolerance the same element passes."""
    ref = np.random.default_rng().standard_normal(shape)
    tol = 1e-5 * (np.abs(ref) + np.sqrt(np.mean(ref**2)))  # compare's float32 bound, element by element
    last = tuple(n - 1 for n in shape)
    for factor, ok in ((0.3, True), (3.0, False)):
        out = ref.copy()
        out[last] += factor * tol[last]
        c = compare(out.astype(np.float32), ref)
        assert c.ok == ok, (factor, str(c))
        if not ok:
            assert c.n_bad == 1 and c.worst_index == last and c.rtol == 1e-5
    out = ref.astype(np.float32)
    out.reshape(-1)[-ref.size // 3:] = np.float32(0.0)  # a kernel that never wrote its last third (zeros)
    assert not compare(out, ref).ok


def test_compare_integers_exact_and_infinities():
    assert compare(np.arange(5), np.arange(5)).ok
    assert not compare(np.array([0, 1, 3]), np.array([0, 1, 2])).ok
    assert compare(np.array([np.inf, 1.0], np.float32), np.array([np.inf, 1.0])).ok


def test_check_raises_with_worst_element():
    ref = np.ones(8)
    with pytest.raises(AssertionError, match=r"worst at \[3\]"):
        out = np.ones(8, np.float32)
        out[3] = 2
        cudl.check(out, ref)


def test_poisoned_and_randn_are_fresh():
    p = cudl.poisoned(10)
    assert np.isnan(cudl.to_numpy(p)).all()
    assert (cudl.to_numpy(cudl.poisoned(4, np.int32)) == np.iinfo(np.int32).max).all()
    a, b = cudl.randn(100), cudl.randn(100)
    assert not np.array_equal(cudl.to_numpy(a), cudl.to_numpy(b))


# ------------------------------------------------------------------------------ kernel.py (argument checks)

def _fake_kernel():
    return cudl.Kernel("vector_add", parse_params(SRC, "vector_add"), "<src>", None, "emulator")


def test_launch_opts_in_above_48_kib_of_static_plus_dynamic_shared_memory(monkeypatch):
    """On a GPU a launch asks for more dynamic shared memory (cuFuncSetAttribute) when static + dynamic bytes
    pass 48 KiB, not only when the dynamic bytes alone do: otherwise the launch fails (invalid argument)."""
    import cudl.kernel as kmod

    class Impl:  # a compiled kernel as CuPy gives it: static shared bytes, and a launch
        shared_size_bytes = 16 * 1024

        def __call__(self, grid, block, args, shared_mem=0):
            pass

    asked = []
    monkeypatch.setattr(kmod, "allow_shared", lambda impl, n: asked.append(n))
    k = cudl.Kernel("vector_add", parse_params(SRC, "vector_add"), "<src>", Impl(), "gpu")
    monkeypatch.setattr(k, "convert", lambda args: list(args))
    for dynamic in (0, 32 * 1024, 40 * 1024, 64 * 1024):
        k((1,), (32,), (None, None, None, 4), shared_mem=dynamic)
    assert asked == [40 * 1024, 64 * 1024]  # 16 + 32 KiB = 48 KiB is still the default limit


def test_convert_python_scalars_to_c_types():
    k = _fake_kernel()
    a = np.zeros(4, np.float32)
    args = k.convert([a, a, a, 4])
    assert args[3].dtype == np.int32


def test_convert_rejects_wrong_dtype_and_count():
    k = _fake_kernel()
    a, d = np.zeros(4, np.float32), np.zeros(4)
    with pytest.raises(TypeError, match="float64"):
        k.convert([a, d, a, 4])
    with pytest.raises(TypeError, match="takes 4 arguments"):
        k.convert([a, a, 4])
    with pytest.raises(ValueError, match="1024"):
        k((1,), (64, 32), [a, a, a, 4])


# ------------------------------------------------------------------------------ bench / ceilings / record

def test_timing_rates():
    t = Timing("copy", ms=2.0, q1_ms=1.9, q3_ms=2.1, runs=10, bytes=4e9, flops=1e12)
    assert t.gbps == pytest.approx(2000) and t.tflops == pytest.approx(500)
    assert t.speedup_over(Timing("slow", 4.0, 4.0, 4.0, 10)) == pytest.approx(2.0)
    assert "2,000 GB/s" in str(t)


def test_bench_and_ceilings_say_gpu_only():
    with pytest.raises(cudl.GpuOnly, match="needs a CUDA GPU"):
        cudl.bench(lambda: None)
    with pytest.raises(cudl.GpuOnly):
        cudl.ceilings()


def test_bench_setup_runs_before_every_call_untimed(monkeypatch):
    """bench(setup=...): setup precedes every call of fn and is outside the events (a fake clock)."""
    import sys
    import types

    bench_mod = sys.modules["cudl.bench"]  # the module (cudl.bench is the function)
    clock, calls = [0.0], []

    class Event:
        def record(self):
            self.t = clock[0]

        def synchronize(self):
            pass

    stream = types.SimpleNamespace(synchronize=lambda: calls.append("sync"))
    cuda = types.SimpleNamespace(Event=Event, get_current_stream=lambda: stream,
                                 get_elapsed_time=lambda s, e: e.t - s.t)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(bench_mod, "require_gpu", lambda what: None)

    def setup():
        clock[0] += 100.0
        calls.append("setup")

    def fn():
        clock[0] += 1.0 if calls[-2:] == ["setup", "sync"] else 50.0  # 50: no setup before
        calls.append("fn")

    t = bench_mod.bench(fn, setup=setup, flush=False, min_runs=4, rep_ms=4, warmup_ms=1)
    assert t.ms == 1.0 and t.runs == 4 and set(t.times_ms) == {1.0}
    assert calls.count("setup") == calls.count("fn") == 1 + 2 + 1 + 4


def test_datasheet_matches_device_names():
    assert datasheet("NVIDIA H100 80GB HBM3")["sms"] == 132
    assert datasheet("Tesla T4")["bw"] == 320
    assert datasheet("NVIDIA GeForce RTX 4090")["l2_mb"] == 72
    assert datasheet("NVIDIA A100-SXM4-80GB")["fp32"] == 19.5
    assert datasheet("Some Future GPU") is None


def test_record_is_a_no_op_without_gpu_and_slug():
    t = Timing("k", 1.0, 1.0, 1.0, 10)
    assert cudl.record(t, chapter="01-first-kernel", shape=1, dtype="float32") is None
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_size_and_banner_on_emulator():
    assert cudl.size(gpu=1 << 26, emulator=1 << 12) == 1 << 12
    assert "CPU emulator" in cudl.banner()


# ------------------------------------------------------------------------------ nbtools

def test_strip_solution_keeps_stub():
    text = "a\n    // BEGIN SOLUTION\n    secret();\n    // END SOLUTION\n    // STUB: // TODO\nb"
    assert nbtools.strip_solution(text) == "a\n    // TODO\nb"
    assert nbtools.strip_solution("<!-- BEGIN SOLUTION -->\nanswer\n<!-- END SOLUTION -->\nq") == "q"


def test_exercise_keeps_no_outputs_and_labels_the_expected_verdict():
    import nbformat

    nb = nbformat.v4.new_notebook()
    keep = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\ncudl.grade.saxpy(src)")
    keep.outputs = [nbformat.v4.new_output("stream", text="PASS saxpy: 6/6 cases\n")]
    drop = nbformat.v4.new_code_cell("src = '''\n// BEGIN SOLUTION\nx\n// END SOLUTION\n'''")
    drop.outputs = [nbformat.v4.new_output("stream", text="noise\n")]
    nb.cells = [drop, keep]
    ex = nbtools.exercise_from_solution(nb)
    assert ex.cells[0].outputs == [] and "x" not in ex.cells[0].source.splitlines()
    assert ex.cells[1].cell_type == "markdown" and "Expected output" in ex.cells[1].source
    assert "`PASS saxpy: 6/6 cases`" in ex.cells[1].source
    assert ex.cells[2].outputs == [] and ex.cells[2].execution_count is None


def test_code_hash_follows_code_and_kernels(tmp_path, monkeypatch):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    monkeypatch.setattr(nbtools, "KERNELS_DIR", tmp_path)
    (tmp_path / "99-demo").mkdir()
    (tmp_path / "99-demo" / "k.cu").write_text("// v1")
    h1 = nbtools.code_hash(nb, "99-demo")
    (tmp_path / "99-demo" / "k.cu").write_text("// v2")
    h2 = nbtools.code_hash(nb, "99-demo")
    nb.cells[0].source = "x = 2"
    assert len({h1, h2, nbtools.code_hash(nb, "99-demo")}) == 3


def test_code_hash_follows_includes_and_other_chapters_kernels(tmp_path, monkeypatch):
    """Headers the chapter's kernels #include (recursively) and kernels a cell loads from another chapter by
    path count; other files of that chapter do not."""
    import nbformat

    from cudl import compile as cc

    monkeypatch.setattr(nbtools, "KERNELS_DIR", tmp_path)
    monkeypatch.setattr(cc, "KERNELS_DIR", tmp_path)
    (tmp_path / "99-demo").mkdir()
    (tmp_path / "98-other").mkdir()
    (tmp_path / "99-demo" / "k.cu").write_text('#include "98-other/outer.cuh"\n')
    (tmp_path / "98-other" / "outer.cuh").write_text('#include "inner.cuh"\n')
    inner, loaded, unrelated = (tmp_path / "98-other" / n for n in ("inner.cuh", "loaded.cu", "unrelated.cu"))
    for f in (inner, loaded, unrelated):
        f.write_text("// v1")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('k = cudl.load("98-other/loaded.cu", "k")')]
    hashes = [nbtools.code_hash(nb, "99-demo")]
    for f in (inner, loaded):
        f.write_text("// v2")
        hashes.append(nbtools.code_hash(nb, "99-demo"))
    assert len(set(hashes)) == 3
    unrelated.write_text("// v2")
    assert nbtools.code_hash(nb, "99-demo") == hashes[-1]


def test_bootstrap_cell_reads_config_url():
    url = nbtools.repository_url()
    assert url.startswith("https://github.com/")
    src = nbtools.bootstrap_source(url)
    assert src.startswith(nbtools.BOOTSTRAP_MARK) and f'"{url}"' in src and src.endswith("cudl.setup()")


def test_bf16_bits_round_trip_and_compare():
    from cudl.check import bf16_to_float, compare, float_to_bf16

    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, np.inf], dtype=np.float32)
    bits = float_to_bf16(x)
    back = bf16_to_float(bits)
    assert np.all(np.abs(back[:5] - x[:5]) <= 2**-8 * np.abs(x[:5]))
    assert np.isinf(back[5])
    assert float_to_bf16(np.float32(1.0 + 2**-8)) == 0x3F80  # a tie rounds to even (down here)
    assert float_to_bf16(np.float32(1.0 + 3 * 2**-8)) == 0x3F82  # ... and up here
    assert float_to_bf16(np.float32(1.0 + 3 * 2**-9)) == 0x3F81  # 3/4 of a bf16 ulp: to nearest, not truncated
    assert float_to_bf16(np.float32(-(1.0 + 3 * 2**-9))) == 0xBF81
    assert compare(bits, x.astype(np.float64)).ok
    wrong = bits[:4].copy()
    wrong[2] ^= 0x0040  # the top mantissa bit: off by a lot
    assert not compare(wrong, x[:4].astype(np.float64)).ok


def test_sync_keeps_outputs_when_only_prose_changes(tmp_path):
    """Editing a chapter's text must not drop the GPU outputs stored in its .ipynb; stripped outputs are flagged."""
    import nbformat

    from cudl import nbtools

    (tmp_path / "chapters").mkdir()
    md = tmp_path / "chapters" / "99-demo.md"
    header = ("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
              "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n")
    cells = "```{code-cell} ipython3\n# cudl bootstrap\n```\n\n```{code-cell} ipython3\nprint(6 * 7)\n```\n"
    md.write_text(header + "# Demo\n\nFirst words.\n\n" + cells)
    nbtools.sync(tmp_path)
    ipynb = md.with_suffix(".ipynb")
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.metadata["cudl"].update(code_hash=nbtools.code_hash(nb, "99-demo"), executed_on="a GPU")
    nbformat.write(nb, ipynb)
    assert nbtools.problems(tmp_path) == []

    md.write_text(header + "# Demo\n\nBetter words.\n\n" + cells)
    nbtools.sync(tmp_path)
    nb = nbformat.read(ipynb, as_version=4)
    assert "Better words." in nb.cells[0].source
    assert nb.cells[-1].outputs[0]["text"] == "42\n"
    assert nbtools.problems(tmp_path) == []

    nb.cells[-1].outputs = []
    nbformat.write(nb, ipynb)
    assert any("stores no outputs" in p for p in nbtools.problems(tmp_path))


def test_show_displays_highlighted_cuda(capsys):
    import IPython.display

    shown = []
    orig = IPython.display.display
    IPython.display.display = lambda obj, raw=False: shown.append(obj)
    try:
        cudl.show("01-first-kernel/vector_add.cu", lines=(1, 2))
    finally:
        IPython.display.display = orig
    md = shown[0]["text/markdown"]
    assert md.startswith("```cuda\n// vector_add") and md.endswith("```") and md.count("\n") == 3


def test_show_picks_a_part_by_text():
    """start/stop select from the line holding `start` to the one before `stop`; header=True shows the
    leading comment block first (once: not before a whole file, which begins with it); a marker that is not
    there is an error that names it."""
    import IPython.display

    src = "// what\n// why\nint a;\n// -- part\nint b;\nint c;\n// -- next\nint d;\n"
    shown = []
    orig = IPython.display.display
    IPython.display.display = lambda obj, raw=False: shown.append(obj["text/plain"])
    try:
        cudl.show(src, start="-- part", stop="-- next")
        cudl.show(src, start="-- next", header=True)
        cudl.show(src, header=True)  # the whole file: its header once, not again before it
        with pytest.raises(ValueError, match="-- nowhere"):
            cudl.show(src, start="-- nowhere")
    finally:
        IPython.display.display = orig
    assert shown == ["// -- part\nint b;\nint c;", "// what\n// why", "// -- next\nint d;", src.rstrip("\n")]


def test_launch_checks_survive_the_fast_path():
    """Kernel.__call__ looks its checks up once per kernel (cudl/kernel.py `_plan`); every check still fires."""
    from cudl.kernel import _dim3

    assert _dim3((4, 2), "grid") == (4, 2, 1) and _dim3(7, "grid") == (7, 1, 1)
    assert _dim3([2, np.int64(3)], "grid") == (2, 3, 1)
    for bad in ((0,), (1, 2, 3, 4), (), (2, -1)):
        with pytest.raises(ValueError, match="positive"):
            _dim3(bad, "grid")
    k = _fake_kernel()
    a = np.zeros(4, np.float32)
    ro = a.copy()
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        k.convert([a, a, ro, 4])  # the output parameter of vector_add
    with pytest.raises(TypeError, match="pass an array"):
        k.convert([a, 3.0, a, 4])
    with pytest.raises(TypeError, match="scalar"):
        k.convert([a, a, a, a])
    assert [type(v) for v in k.convert([a, ro, a, np.int64(4)])][3] is np.int32


def test_bootstrap_cell_is_folded_on_the_site():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# cudl bootstrap (old)\nimport cudl")])
    assert nbtools.set_bootstrap(nb, "https://example.org/book")
    assert nb.cells[0].metadata["tags"] == ["hide-input"]
    assert not nbtools.set_bootstrap(nb, "https://example.org/book")  # idempotent


def test_compare_scales_a_cancelling_sum_by_its_terms():
    """A float32 sum near 0 is off by rounding relative to sum|x|: with scale=sum|x| a correct sum passes
    (it fails with the default scale, the result itself), and a sum that lost one element still fails."""
    import numpy as np

    from cudl.check import compare

    rng = np.random.default_rng(7)
    x = rng.standard_normal(256).astype(np.float32)
    x[-1] = np.float32(-x[:-1].astype(np.float64).sum() + 1e-3)  # the exact sum is about 1e-3
    exact = x.astype(np.float64).sum()
    got = np.float32(0)
    for v in x:  # sequential float32 sum: error ~ n u sum|x|, far above 1e-5 of the sum itself
        got = np.float32(got + v)
    terms = np.abs(x.astype(np.float64)).sum()
    assert not compare(np.array([got]), np.array([exact])).ok
    assert compare(np.array([got]), np.array([exact]), scale=[terms]).ok
    lost = np.float32(got - x[100])
    assert not compare(np.array([lost]), np.array([exact]), scale=[terms]).ok


def test_l2_flush_modes():
    """CUDL_L2_FLUSH takes "read" (default) or "write"; the read flush's kernel compiles for the T4 up."""
    import os

    from cudl.bench import _READ_FLUSH_SRC, flush_mode
    from cudl.compile import nvrtc_compile

    old = os.environ.pop("CUDL_L2_FLUSH", None)
    try:
        assert flush_mode() == "read"
        os.environ["CUDL_L2_FLUSH"] = "write"
        assert flush_mode() == "write"
        os.environ["CUDL_L2_FLUSH"] = "clean"
        with pytest.raises(ValueError, match="CUDL_L2_FLUSH"):
            flush_mode()
    finally:
        os.environ.pop("CUDL_L2_FLUSH", None)
        if old is not None:
            os.environ["CUDL_L2_FLUSH"] = old
    nvrtc_compile(_READ_FLUSH_SRC, "read_flush.cu", "sm_75")  # raises CompileError on an error


def test_span_collapses_equal_ends():
    assert cudl.span([59.4, 80.2, 71]) == "59-80"
    assert cudl.span([89.2, 88.6]) == "89"  # not "89-89"
    assert cudl.span([1.234, 1.78], ".2f") == "1.23-1.78"
    assert cudl.span([3.0]) == "3"


def test_unseeded_draws_come_from_the_printed_seed(request):
    """tests/conftest.py: an unseeded default_rng() in a test is the next child of the seed built from
    CUDL_TEST_SEED and the test's id (what a failure prints), so a rerun with that seed draws the same inputs;
    two draws in one test still differ."""
    import conftest

    first, second = np.random.default_rng().standard_normal(4), np.random.default_rng().standard_normal(4)
    children = np.random.SeedSequence(conftest.seed_material(request.node.nodeid)).spawn(2)
    assert np.array_equal(first, conftest._real_default_rng(children[0]).standard_normal(4))
    assert np.array_equal(second, conftest._real_default_rng(children[1]).standard_normal(4))
    assert not np.array_equal(first, second)


def test_tma_args_of_a_column_range():
    """tensor_map_args of a column range a[:, k0:k1] of a row-major fp16 matrix (split-K's A slice): the view's
    own columns and rows, the parent's row stride in bytes, the box innermost first."""
    from cudl.tma import tensor_map_args

    a = np.zeros((256, 1024), np.float16)
    v = a[:, 192:512]
    dims, strides, box = tensor_map_args(v.shape, v.strides, v.itemsize, 0x7f0000000000 + 192 * 2, (128, 64))
    assert dims == [320, 256] and strides == [1024 * 2] and box == [64, 128]
    assert tensor_map_args(a.shape, a.strides, 2, 0x100, (64, 64)) == ([1024, 256], [2048], [64, 64])


@pytest.mark.parametrize(("view", "ptr", "rule"), [
    (lambda a: a[:, ::2], 0x100, "column stride"),   # elements not contiguous in a row
    (lambda a: a[:, 8:], 0x110, "row stride"),       # rows 2 x 1004 bytes apart: not a multiple of 16
    (lambda a: a.T, 0x100, "column stride"),         # a transpose: the columns are rows apart
    (lambda a: a[:, 1:9], 0x102, "16-byte aligned")])  # one element into a 16-byte word
def test_tma_args_refuse_what_tma_cannot_read(view, ptr, rule):
    from cudl.tma import tensor_map_args

    v = view(np.zeros((64, 1024 if rule == "16-byte aligned" else 1004), np.float16))
    with pytest.raises(ValueError, match=rule):
        tensor_map_args(v.shape, v.strides, v.itemsize, ptr, (64, 64))


def test_tensor_map_2d_passes_a_strided_view_to_the_driver(monkeypatch):
    """tensor_map_2d of a strided view (fake driver and CuPy): the view's address, dims and row stride reach
    cuTensorMapEncodeTiled, and its 16 words come back as a uint64 array."""
    import sys
    import types

    from cudl.tma import tensor_map_2d

    seen = {}

    def encode(dtype, rank, ptr, dims, strides, box, elem, *modes):
        seen.update(rank=rank, ptr=ptr, dims=dims, strides=strides, box=box)
        return "ok", types.SimpleNamespace(opaque=list(range(16)))

    names = ("CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle", "CUtensorMapL2promotion",
             "CUtensorMapFloatOOBfill")
    driver = types.SimpleNamespace(cuTensorMapEncodeTiled=encode, cuuint64_t=int, cuuint32_t=int,
                                   CUresult=types.SimpleNamespace(CUDA_SUCCESS="ok"),
                                   **{n: types.SimpleNamespace(**{k: k for k in (
                                       "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "CU_TENSOR_MAP_DATA_TYPE_UINT8",
                                       "CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_128B",
                                       "CU_TENSOR_MAP_SWIZZLE_NONE", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
                                       "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")}) for n in names})
    monkeypatch.setitem(sys.modules, "cuda", types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.SimpleNamespace(driver=driver))
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(asarray=np.asarray))

    class View:  # what a CuPy view a[:, 64:192] of a [128, 4096] fp16 matrix at 0x10000 shows
        shape, strides, dtype, itemsize, ndim = (128, 128), (8192, 2), np.dtype(np.float16), 2, 2
        data = types.SimpleNamespace(ptr=0x10000 + 64 * 2)

    words = tensor_map_2d(View(), (128, 64))
    assert seen == dict(rank=2, ptr=0x10000 + 128, dims=[128, 128], strides=[8192], box=[64, 128])
    assert words.dtype == np.uint64 and words.tolist() == list(range(16))
    View.strides = (8190, 2)
    with pytest.raises(ValueError, match="row stride"):
        tensor_map_2d(View(), (128, 64))


def test_address_is_the_first_element():
    a = cudl.xp.zeros(64, dtype=np.float32)
    assert cudl.address(a[5:]) - cudl.address(a) == 20  # a view starts 5 floats in
    host = np.zeros(8, dtype=np.float32)
    assert cudl.address(host) == host.ctypes.data  # a NumPy array: its host address
