"""Graders are not vacuous: enough cases with edge sizes, and every mutant kernel is refused.

Runs on the current backend: the CPU emulator in CI, the GPU under `make gpu-test`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudl.grade import EMULATOR_LAUNCH_S, LAUNCH_S, REGISTRY, Verdict, _combine, _load_all, run
from cudl.grade.extract import graded_sources

_load_all()
ROOT = Path(__file__).resolve().parents[1]
# tests/mutants/NN-slug/<grader>__<mutation>.cu must be refused; <grader>__ok_<style>.cu are correct kernels
# written another way (another launch shape, loop order, summation order) that must PASS.
KERNELS = sorted((Path(__file__).parent / "mutants").rglob("*.cu"))
MUTANTS = [p for p in KERNELS if "__ok_" not in p.name]
RIGHT = [p for p in KERNELS if "__ok_" in p.name]
ON_EMULATOR = os.environ.get("CUDL_BACKEND") != "gpu"
ON_GPU = not ON_EMULATOR


def _emulator_faults_on_misaligned_float4() -> bool:
    """Whether this cudl's CPU emulator reports a float4 access that is not 16-byte aligned, as a GPU does."""
    import numpy as np

    import cudl
    from cudl import KernelFault

    k = cudl.load('extern "C" __global__ void probe(float* x) { reinterpret_cast<float4*>(x + 1)[0].x = 1.0f; }',
                  "probe")
    try:
        k((1,), (1,), (np.zeros(8, np.float32),))
    except KernelFault:
        return True
    return False


def _emulator_needs(feature: str) -> bool:
    from cudl.grade.checks import schedule_supported

    probes = {"schedule": schedule_supported, "alignment": _emulator_faults_on_misaligned_float4}
    return probes[feature]()


def _skip_unless_this_backend_refuses(path: Path) -> None:
    """A kernel's first comment lines may say what its refusal needs: `// grader-test: gpu-only (why)` (only a
    GPU shows the fault, or only a GPU times it), or `// grader-test: emulator-needs schedule|alignment` (the
    emulator refuses it once it runs threads in reverse order / checks the alignment of vector accesses)."""
    for line in path.read_text().splitlines():
        if not line.startswith("//"):
            break
        words = line[2:].split()
        if words[:1] != ["grader-test:"]:
            continue
        if words[1] == "gpu-only" and ON_EMULATOR:
            pytest.skip(f"{path.name}: refused on a GPU only: {' '.join(words[2:])}")
        if words[1] == "emulator-needs" and ON_EMULATOR and not _emulator_needs(words[2]):
            pytest.skip(f"{path.name}: the CPU emulator refuses it once it has {words[2]} support "
                        "(cudl/emulator, helper emu)")


def _solutions() -> list[tuple[str, str]]:
    return [(c.grader, c.source) for nb in sorted((ROOT / "solutions").glob("*.ipynb")) for c in graded_sources(nb)]


def test_graders_exist():
    assert REGISTRY, "no graders registered"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_grader_has_edge_cases_and_hint(name):
    g = REGISTRY[name]
    assert len(g.cases) >= 4 and len(g.cases) == len(g.emulator_cases)
    assert g.hint, "a FAIL line should tell the student where to look"
    mutants = [m for m in MUTANTS if m.name.split("__")[0] == name]
    assert len(mutants) >= 3, f"grader {name} needs at least 3 mutants in tests/mutants/"


@pytest.mark.parametrize("path", MUTANTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_mutant_is_refused(path):
    name = path.name.split("__")[0]
    assert name in REGISTRY, f"{path.name}: no grader {name!r}"
    _skip_unless_this_backend_refuses(path)
    verdict = run(name, path.read_text(), quiet=True)
    print(verdict.line)
    assert verdict.status in ("FAIL", "CRASH", "TIMEOUT", "SLOW"), verdict.line


@pytest.mark.parametrize("path", RIGHT, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_correct_kernel_in_another_style_passes(path):
    """A grader that refuses a correct kernel is as wrong as one that passes a broken one."""
    name = path.name.split("__")[0]
    assert name in REGISTRY, f"{path.name}: no grader {name!r}"
    verdict = run(name, path.read_text(), quiet=True)
    print(verdict.line)
    # a style may be slower than the solution: on a GPU only correctness is asked of it here
    assert verdict.status in (("PASS", "SLOW") if ON_GPU else ("PASS",)), verdict.line


@pytest.mark.parametrize("name,source", _solutions(), ids=lambda v: v if len(v) < 40 else "src")
def test_solution_passes_well_inside_the_launch_limit(name, source):
    """Every published solution passes (on a GPU: cross-checked on the emulator too), and its slowest launch
    leaves a wide margin under LAUNCH_S, so the limit that reports hangs is never flaky for it."""
    verdict = run(name, source, quiet=True)
    assert verdict.status == "PASS" and verdict.line == f"PASS {name}: {len(REGISTRY[name].cases)}/"\
        f"{len(REGISTRY[name].cases)} cases", verdict.line
    # on a GPU the cross-check's emulator launches count too: only a failed cross-check reports them
    limit = LAUNCH_S if ON_GPU else EMULATOR_LAUNCH_S
    assert verdict.slowest_launch_s < limit / 4, verdict.slowest_launch_s


def test_hung_kernel_is_reported_within_15_s():
    src = ('extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {\n'
           "    volatile float* p = y;  // a volatile global read: no compiler may drop the loop\n"
           "    while (p[0] == p[0]) { }\n}\n")
    t0 = time.monotonic()
    verdict = run("saxpy", src, quiet=True)
    # TIMEOUT from the grader's limit on a GPU, from the emulator's watchdog (no progress for 10 s) there
    assert verdict.status == "TIMEOUT" and "case 1/" in verdict.line, verdict.line
    assert time.monotonic() - t0 < 15 + 10  # 10 s of limit; compiling takes the rest (g++, NVRTC)


def test_grading_from_a_script_without_main_guard(tmp_path):
    """multiprocessing's spawn would re-import such a script; the grading process is `python -m` instead."""
    script = tmp_path / "grade_it.py"
    sol = dict(_solutions())["saxpy"]
    script.write_text(f"import cudl\ncudl.grade.saxpy({sol!r})\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1].startswith("PASS saxpy"), out


def _notebook(path: Path, cells: list[str]) -> Path:
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c}
                    for c in cells]}
    path.write_text(json.dumps(nb))
    return path


def test_cli_does_not_trust_the_notebook(tmp_path):
    """A notebook that replaces the grader by a print of PASS, or grades a source built at run time, fails."""
    sols = dict(_solutions())
    stub = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }'
    forged = _notebook(tmp_path / "01-first-kernel.ipynb", [
        "import cudl\ncudl.grade.saxpy = lambda src: print('PASS saxpy: 6/6 cases')",
        f"saxpy_src = {stub!r}",
        "# NBVAL_CHECK_OUTPUT\ncudl.grade.saxpy(saxpy_src)",
        f"rgb_to_gray_src = {sols['rgb_to_gray']!r}\nrgb_to_gray_src = rgb_to_gray_src.replace('0.299', '0.3')",
        "# NBVAL_CHECK_OUTPUT\ncudl.grade.rgb_to_gray(rgb_to_gray_src)",
        f"%%time\nscale_src = {sols['scale_shift']!r}",
        "# NBVAL_CHECK_OUTPUT\ncudl.grade.run('scale_shift', scale_src)",
    ])
    csv_path = tmp_path / "out.csv"
    out = subprocess.run([sys.executable, "-m", "cudl.grade", str(tmp_path), "--csv", str(csv_path)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 1, out
    lines = [ln.strip() for ln in out.stdout.splitlines()]
    assert lines[0] == str(forged)
    assert lines[1].startswith("FAIL saxpy: case 1/"), lines  # the stub, graded for real
    assert lines[2].startswith("FAIL rgb_to_gray: missing: its kernel source is not a string literal"), lines
    assert lines[3] == "PASS scale_shift: 5/5 cases", lines
    rows = csv_path.read_text().splitlines()
    assert lines[4].startswith("FAIL fma_float4: missing: no graded cell"), lines  # the challenge, not attempted
    assert rows[0] == "file,grader,verdict,detail" and len(rows) == 5
    assert rows[3].startswith(f"{forged},scale_shift,PASS,"), rows


def test_cli_reports_a_missing_graded_cell(tmp_path):
    nb = _notebook(tmp_path / "04-reductions.ipynb", ["print('PASS block_sum: 6/6 cases')"])
    out = subprocess.run([sys.executable, "-m", "cudl.grade", str(nb)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 1
    missing = [ln.strip() for ln in out.stdout.splitlines()[1:]]
    assert missing == [f"FAIL {g}: missing: no graded cell (# NBVAL_CHECK_OUTPUT) calls cudl.grade.{g}"
                       for g in ("block_sum", "row_max", "row_argmax", "row_logsumexp")], missing


def test_extraction_reads_only_string_literals(tmp_path):
    nb = _notebook(tmp_path / "x.ipynb", [
        "a_src = 'one'\nb_src = 'two'",
        "# NBVAL_CHECK_OUTPUT\ncudl.grade.alpha(a_src)",
        "a_src = open('k.cu').read()\n# NBVAL_CHECK_OUTPUT\ncudl.grade.alpha(a_src)",
        "b_src = 'three'\n# NBVAL_CHECK_OUTPUT\ncudl.grade.beta(b_src)",
        "cudl.grade.gamma(b_src)",  # not a graded cell
        "# NBVAL_CHECK_OUTPUT\nthis is not python",
    ])
    got = [(c.grader, c.source) for c in graded_sources(nb)]
    assert got == [("alpha", "one"), ("alpha", None), ("beta", "three")]


def test_combined_verdicts():
    """On a GPU the emulator's finding wins over a GPU PASS; a missing compiler or an emulator limit is said."""
    g = REGISTRY["block_sum"]
    ok = Verdict("PASS", "PASS block_sum: 6/6 cases")
    found = Verdict("CRASH", "CRASH block_sum: case 1/6 (n=1): __syncthreads() at k.cu:11 reached by only 1 of 256")
    v = _combine(g, [ok, found], "")
    assert v.status == "CRASH" and "__syncthreads()" in v.line and "CPU emulator" in v.line
    assert _combine(g, [Verdict("PASS", ok.line), Verdict("PASS", ok.line)], "").line == ok.line
    v = _combine(g, [Verdict("PASS", ok.line)], " (the CPU emulator's check was skipped: no C++ compiler)")
    assert v.status == "PASS" and v.line.startswith(ok.line) and "skipped: no C++ compiler" in v.line
    v = _combine(g, [Verdict("PASS", ok.line), Verdict("UNSUPPORTED", "FAIL block_sum: cannot be graded on the "
                                                                      "CPU emulator: inline PTX")], "")
    assert v.status == "PASS" and "skipped" in v.line and "inline PTX" in v.line
    wrong = Verdict("FAIL", "FAIL block_sum: case 5/6 (n=1048583): 3 of 4097 elements wrong")
    assert _combine(g, [wrong, found], "") is wrong


def test_speed_noise_never_makes_the_solution_slow(monkeypatch):
    """The solution timed against itself is never SLOW at F >= 1.5: each median off by up to 20%, and a
    3x outlier (another process on the GPU) in up to 2 of the 3 rounds."""
    import importlib
    import random

    from cudl.bench import Timing
    from cudl.grade.speed import MIN_FACTOR, ROUNDS, is_slow, measure

    rng = random.Random(7)
    for _ in range(2000):
        outliers = set(rng.sample(range(ROUNDS), rng.randint(0, ROUNDS - 1)))
        calls = iter(range(2 * ROUNDS))  # measure alternates solution, student

        def timer(fn, name="", **kwargs):
            k = next(calls)
            ms = rng.uniform(0.8, 1.2) * (3.0 if k % 2 and k // 2 in outliers else 1.0)
            return Timing(name, ms, ms, ms, 1, times_ms=[ms])

        monkeypatch.setattr(importlib.import_module("cudl.bench"), "bench", timer)
        times = measure(["k"], ["k"])
        assert not is_slow(times["student"], times["solution"], MIN_FACTOR), times
    slow = {"student": [5.0, 5.2, 4.9], "solution": [1.0, 1.1, 0.9]}
    assert is_slow(slow["student"], slow["solution"], 2.0)
    with pytest.raises(ValueError, match="F >= 1.5"):
        from cudl.grade import grader

        grader("_bad", kernels=["k"], cases=[{}], speed=dict(case={}, factor=1.1))


def test_speed_verdict_line():
    from cudl.grade import REGISTRY as R

    g = R["block_sum"]
    g2 = type(g)(**{**g.__dict__, "speed": dict(case=dict(n=2**24 + 3), factor=2.0)})
    v = _combine(g2, [Verdict("PASS", "PASS block_sum: 6/6 cases",
                              timing={"student": [3.1, 3.0, 3.2], "solution": [0.2, 0.21, 0.2]})], "")
    assert v.status == "SLOW" and v.line.startswith("SLOW block_sum: 3 ms, solution 0.21 ms (target <= 2x)")
    v = _combine(g2, [Verdict("PASS", "PASS block_sum: 6/6 cases",
                              timing={"student": [0.22, 0.2, 0.25], "solution": [0.2, 0.21, 0.2]})], "")
    assert v.line == "PASS block_sum: 6/6 cases"


def test_speed_on_a_gpu(monkeypatch):
    """The solution against itself PASSes; a correct but serial kernel is SLOW (speed is graded on a GPU only)."""
    from cudl import on_gpu

    monkeypatch.setenv("CUDL_GRADE_MODULES", "tests.grade_fixtures")
    monkeypatch.syspath_prepend(str(ROOT))
    import tests.grade_fixtures as fx

    sol = REGISTRY["block_sum_timed"].solution
    assert sol and "__shfl_down_sync" in sol
    v = run("block_sum_timed", sol, quiet=True)
    assert v.status == "PASS", v.line
    v = run("block_sum_timed", fx.SERIAL_BLOCK_SUM, quiet=True)
    print(v.line, v.timing)
    assert v.status == ("SLOW" if on_gpu() else "PASS"), v.line


def test_unsupported_kernel_is_a_clear_fail_on_the_emulator():
    from cudl import on_gpu

    if on_gpu():
        pytest.skip("the emulator's limits only")
    src = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { asm volatile("membar.gl;"); }'
    verdict = run("saxpy", src, quiet=True)
    assert verdict.status == "FAIL" and "run this cell on a GPU" in verdict.line, verdict.line


def test_guard_zone_catches_a_stray_write():
    import numpy as np

    from cudl import KernelFault, to_numpy
    from cudl.grade.guard import check_guard, guarded, guarded_output

    view, whole = guarded(np.arange(10, dtype=np.float32), fill=1.0, guard=8)
    assert view.shape == (10,) and whole.size == 18 and (to_numpy(whole)[10:] == 1.0).all()
    view[:] = 0  # writes inside the array are fine
    check_guard(whole, 10, "y", fill=1.0)
    whole[13] = 5.0  # a stray write past the end
    with pytest.raises(KernelFault, match=r"y\[13\]"):
        check_guard(whole, 10, "y", fill=1.0)

    out, whole = guarded_output((3, 4))  # NaN output, NaN guard: untouched NaN is not a change
    assert out.shape == (3, 4) and np.isnan(to_numpy(whole)).all()
    out[:] = 2.0
    check_guard(whole, 12, "out")
    whole[12] = 0.0
    with pytest.raises(KernelFault, match=r"out\[12\] \(out has 12 elements"):
        check_guard(whole, 12, "out")

    out, whole = guarded_output(5, np.int32, guard=4)  # integers: poisoned with iinfo.max
    check_guard(whole, 5, "idx")
    whole[8] = 0
    with pytest.raises(KernelFault, match=r"idx\[8\]"):
        check_guard(whole, 5, "idx")


def test_hint_tiers_print_in_order(capsys):
    from cudl.grade import Grader, hint

    REGISTRY["_tiers"] = Grader("_tiers", ("k",), [{}] * 4, [{}] * 4, lambda load, case: [], ("first", "second"))
    try:
        assert REGISTRY["_tiers"].hint == "first"
        hint("_tiers", 2)
        out = capsys.readouterr().out
        assert "Hint 2/2" in out and "second" in out and "solution notebook" in out
        hint("_tiers", 1)
        assert "hint('_tiers', 2) gives more" in capsys.readouterr().out
    finally:
        del REGISTRY["_tiers"]


def test_two_grading_processes_side_by_side():
    """The machinery of a GPU verdict's cross-check, on two emulator processes: the second one's finding wins."""
    from cudl.grade import _Job, _wait

    g = REGISTRY["block_sum"]
    mutant = (ROOT / "tests/mutants/04-reductions/block_sum__early_return.cu").read_text()
    jobs = [_Job(g, dict(_solutions())["block_sum"], "emulator", LAUNCH_S, False),
            _Job(g, mutant, "emulator", LAUNCH_S, False)]
    try:
        _wait(jobs, lambda: all(j.verdict is not None for j in jobs))
    finally:
        for j in jobs:
            j.close()
    assert jobs[0].verdict.status == "PASS", jobs[0].verdict.line
    v = _combine(g, [jobs[0].verdict, jobs[1].verdict], "")
    assert v.status == "CRASH" and "__syncthreads()" in v.line and v.line.endswith("right numbers this time]")


SLOW_VARIANTS = sorted((Path(__file__).parent / "gpu" / "slow_variants").rglob("*.cu"))


@pytest.mark.parametrize("path", SLOW_VARIANTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_slow_variant_is_correct(path):
    """tests/gpu/time_challenges.py times these against the speed factors: each must be a right answer (PASS
    here and on a GPU's correctness cases), so that only its speed can make it SLOW."""
    verdict = run(path.name.split("__")[0], path.read_text(), quiet=True)
    assert verdict.status in (("PASS", "SLOW") if ON_GPU else ("PASS",)), verdict.line


# ------------------------------------------------------------------------------ checks shared by the graders

def test_same_bits_names_the_first_difference():
    import numpy as np

    from cudl.grade import Refuse
    from cudl.grade.checks import same_bits

    ref = np.array([0x3F80, 0x3FC0, 0x4000], np.uint16)  # bf16 1.0, 1.5, 2.0
    same_bits(ref.copy(), ref, "out", "why")
    got = ref.copy()
    got[1] += 1
    with pytest.raises(Refuse, match=r"1 of 3 elements of out differ .* \[1\]: got 1\.5078125 \(0x3fc1\), "
                                     r"expected 1\.5 \(0x3fc0\): why"):
        same_bits(got, ref, "out", "why")
    # the same bits read as fp16 (exercise 15.3): 0x3fc1 is 1.9384765625 there, 0x3fc0 1.9375
    with pytest.raises(Refuse, match=r"\[1\]: got 1\.9384765625 \(0x3fc1\), expected 1\.9375 \(0x3fc0\): why"):
        same_bits(got, ref, "out", "why", fp16=True)


def test_deterministic_runs_again_in_reverse_order(monkeypatch):
    """The second run happens with CUDL_EMULATOR_SCHEDULE=reverse (and only it); other bits are refused."""
    import numpy as np

    from cudl.grade import Refuse
    from cudl.grade.checks import SCHEDULE_ENV, deterministic

    monkeypatch.delenv(SCHEDULE_ENV, raising=False)
    out = np.zeros(4, np.float32)
    seen = []

    def launch(order_matters: bool) -> None:
        seen.append(os.environ.get(SCHEDULE_ENV))
        backwards = os.environ.get(SCHEDULE_ENV) == "reverse"
        # a sum whose rounding depends on the order: 1 + 2^-24 + 2^-24 in fp32
        terms = [np.float32(1), np.float32(2**-24), np.float32(2**-24)]
        total = np.float32(0)
        for t in (terms[::-1] if backwards and order_matters else terms):
            total = np.float32(total + t)
        out[:] = total

    launch(True)
    with pytest.raises(Refuse, match=r"different bits: out\[0\] was 1\.0, then 1\.0000001192092896"):
        deterministic(lambda: launch(True), [("out", out)], "why")
    assert seen[-1] == "reverse" and SCHEDULE_ENV not in os.environ
    launch(False)
    deterministic(lambda: launch(False), [("out", out)], "why")


def test_pair_rtol_overrides_the_graders():
    import numpy as np

    from cudl.grade import check_pair

    out, ref = np.array([1.0 + 1e-6], np.float32), np.array([1.0])
    assert check_pair((out, ref), 1e-5).ok
    assert not check_pair((out, ref, np.array([0.0]), 1e-7), 1e-5).ok
    assert check_pair((out, ref, np.array([100.0]), 1e-7), None).ok  # 1e-7 * (1 + 100) > 1e-6


# ------------------------------------------------------------------------------ speed grading that cannot be gamed

def _fake_bench(calls: int = 7):
    """A cudl.bench stand-in that runs `fn` as the real one does (setup before every call), untimed."""
    from cudl.bench import Timing

    def bench(fn, setup=None, name="", **kwargs):
        for _ in range(calls):
            if setup is not None:
                setup()
            fn()
        return Timing(name, 1.0, 1.0, 1.0, calls, times_ms=[1.0] * calls)
    return bench


def _record(g, source: str):
    """The speed case's input sets of grader g for `source`, recorded as cudl.grade._child records them."""
    import cudl
    from cudl.grade._child import _Watched
    from cudl.grade.speed import record_sets

    kernels = {k: cudl.load(source, k) for k in g.kernels}
    return record_sets(g, lambda rec: (lambda name: _Watched(kernels[name], lambda *a: None, rec)))


@pytest.mark.skipif(ON_GPU, reason="runs the speed machinery on the emulator with a stand-in timer")
def test_speed_replays_are_rotated_restored_and_checked(monkeypatch):
    """Every timed run replays another input set than the run before, from buffers and module variables restored
    untimed, and the student's outputs are checked after each run: a kernel that skips work for the input of its
    previous launch, or does half of it for an input it has seen, never gets to skip; were its variables kept,
    the half sum would be caught by the check."""
    import importlib

    from cudl.grade.speed import Gamed, ModuleState, measure

    monkeypatch.setattr(importlib.import_module("cudl.bench"), "bench", _fake_bench())
    g = REGISTRY["bias_grad_tall"]
    small = type(g)(**{**g.__dict__, "speed": dict(case=dict(rows=2000, cols=64), factor=2)})
    solution = _record(small, dict(_solutions())["bias_grad_tall"])
    assert len(solution) == 3 and all(len(s.initial) == 2 and s.checks for s in solution)  # dy, db; db checked
    times = measure(solution, solution, rounds=1)
    assert times == {"student": [1.0], "solution": [1.0]}
    mutants = ROOT / "tests/mutants/09-training"

    def by_content(name: str, pointer_test: str) -> str:
        """The mutant keyed by its input's first value only: the emulator copies arguments into new buffers at
        every launch, so the pointer a kernel sees says nothing there."""
        src = (mutants / name).read_text()
        assert src.count(pointer_test) == 1
        return src.replace(pointer_test, "")

    skips = _record(small, by_content("bias_grad_tall__skips_repeated_call.cu",
                                      "atomicAdd(&last_ptr, 0ull) == (u64)dy && "))
    measure(skips, solution, rounds=2)  # rotated: never the input of the launch before, so it does the work
    defers = _record(small, by_content("bias_grad_tall__defers_half.cu",
                                       "atomicAdd(&seen_ptr[i], 0ull) == (u64)dy && "))
    measure(defers, solution, rounds=2)  # its variables as loaded at every run: it never sees an input again
    # Were the module's variables kept, the check after each run would catch half a sum.
    monkeypatch.setattr(ModuleState, "restore", lambda self: None)
    with pytest.raises(Gamed, match=r"run \d+ of a timing loop gave a wrong result"):
        measure(defers, solution, rounds=1)


def test_restore_puts_back_what_the_first_launch_saw():
    import numpy as np

    from cudl.grade.speed import Recorded

    rec = Recorded()
    x, y = np.arange(4, dtype=np.float32), np.full(4, np.nan, np.float32)
    rec.before((x, y, 4))
    y[:] = 2 * x  # the launch
    rec.add(None, ((1,), (4,), (x, y, 4)), {})
    rec.before((y, x))  # a second launch: y already known, nothing new kept
    assert len(rec.initial) == 2
    rec.expect([(y, 2.0 * np.arange(4)), (np.asarray(y).copy() * 0, np.zeros(4))], None)  # a host copy: not live
    assert len(rec.checks) == 1
    rec.restore()
    assert np.isnan(y).all()
    y[:] = 2 * x
    rec.verify("run 1")
    y[1] = 0
    from cudl.grade.speed import Gamed

    with pytest.raises(Gamed):
        rec.verify("run 2")


STATEFUL = r"""
__device__ int launches;              // counts every launch of the module
__device__ int start = 42;            // a non-zero initializer, overwritten by the first launch
__device__ float kept_key[4], kept_sum[4];  // results kept by input (first value), as a cache does
__device__ unsigned kept;
__constant__ float gain;              // filled by the run with set_global before its launch
extern "C" __global__ void stateful(const float* __restrict__ x, float* __restrict__ out, int n) {
    float hit = -1.0f;
    for (unsigned i = 0; i < kept && i < 4; ++i)
        if (kept_key[i] == x[0]) hit = kept_sum[i];
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i];
    out[0] = launches; out[1] = start; out[2] = hit; out[3] = gain * s;
    ++launches;
    start = -1;
    if (kept < 4) { kept_key[kept] = x[0]; kept_sum[kept] = s; ++kept; }
}
"""


@pytest.mark.parametrize("restored", [True, False])
def test_speed_replays_start_from_the_module_variables_as_loaded(monkeypatch, restored):
    """Before every replay the kernels' module variables are put back as they were right after loading: a
    launch counter reads the same count at every replay, a __device__ variable with an initializer has it
    again, a cache of results is empty; what the run filled with set_global is filled again. Without the
    restore (restored=False) the same replays see the counts grow and the cache hit. Both backends: on a GPU
    the variables come from the CUBIN's symbol table and cuModuleGetGlobal."""
    import importlib

    import numpy as np

    import cudl
    from cudl.grade._child import _Watched
    from cudl.grade.speed import ModuleState, Recorded, Rotation, module_state, time_sets

    if not restored:
        monkeypatch.setattr(ModuleState, "restore", lambda self: None)
    k = cudl.load(STATEFUL + f"// {restored}\n", "stateful")  # a module of its own, fresh
    module_state(k)  # right after loading, as cudl.grade._child does
    sets, seen = [], []
    for i in range(3):
        rec = Recorded()
        x, out = cudl.randn(8), cudl.poisoned(4)
        w = _Watched(k, lambda *a: None, rec)
        w.set_global("gain", np.float32(2.0))
        w((1,), (1,), (x, out, 8))
        got = out.get() if hasattr(out, "get") else out
        assert got[0] == i and got[1] == (42 if i == 0 else -1) and got[2] == -1  # recorded on fresh inputs

        def capture(*args, out=out, **kwargs):
            k(*args, **kwargs)
            seen.append(out.get() if hasattr(out, "get") else out.copy())  # CuPy: to the host
        rec.launches = [(capture, a, kw) for _, a, kw in rec.launches]
        sets.append((rec, x))
    monkeypatch.setattr(importlib.import_module("cudl.bench"), "bench", _fake_bench(7))
    k.set_global("gain", np.float32(0.0))  # what a replay must not depend on
    time_sets(Rotation([r for r, _ in sets]), check=False, name="student")
    assert len(seen) == 7
    sums = []
    for _, x in sets:  # in the kernel's order, in fp32: the same bits
        s = np.float32(0)
        for v in (x.get() if hasattr(x, "get") else x):
            s = np.float32(s + v)
        sums.append(s)
    for j, got in enumerate(seen):
        assert got[3] == 2 * sums[j % 3]  # gain filled again (2.0: the product is exact)
    counts, starts, hits = [g[0] for g in seen], [g[1] for g in seen], [g[2] for g in seen]
    if restored:
        assert counts == [0] * 7 and starts == [42] * 7 and hits == [-1] * 7
    else:
        assert counts == list(range(3, 10)) and starts == [-1] * 7 and hits[0] != -1


def test_physical_bound_and_the_impossible_verdict():
    from cudl.grade.speed import physical_bound_ms

    ceil = {"copy_gbps": 2000.0, "gemm_tflops": {"fp32": 50.0, "fp16": 500.0}}
    assert physical_bound_ms(dict(case={}, factor=2), lambda: ceil) is None
    assert physical_bound_ms(dict(case={}, factor=2, bytes=2e9), lambda: ceil) == pytest.approx(1.0)
    assert physical_bound_ms(dict(case={}, factor=2, bytes=2e6, flops=1e12, compute="fp16"),
                             lambda: ceil) == pytest.approx(2.0)  # the FLOPs bound the longer
    g = REGISTRY["bias_grad_tall"]
    fast = Verdict("PASS", "PASS bias_grad_tall: 5/5 cases",
                   timing={"student": [0.004, 0.005, 0.004], "solution": [0.05, 0.05, 0.051], "bound_ms": 0.04})
    v = _combine(g, [fast], "")
    assert v.status == "FAIL" and "faster than this GPU can move its bytes" in v.line, v.line
    ok = Verdict("PASS", "PASS bias_grad_tall: 5/5 cases",
                 timing={"student": [0.05, 0.05, 0.05], "solution": [0.05, 0.05, 0.051], "bound_ms": 0.04})
    assert _combine(g, [ok], "").line == "PASS bias_grad_tall: 5/5 cases"


@pytest.mark.skipif(ON_EMULATOR, reason="speed is graded on a GPU only")
def test_speed_tricks_are_refused_for_their_reason():
    """On a GPU: skipping work for the previous launch's input, doing half of it for an input seen before, copying
    a result kept from an earlier call: each keeps what it knows in __device__ variables, which every timed run
    finds as they were after loading, so each does the full work of the slow kernel it is built on: SLOW. (What
    would catch them otherwise is tested on the emulator: the check after every run with the restore turned
    off, the physical bound with stand-in timings.)"""
    mutants = ROOT / "tests/mutants/09-training"
    for name in ("skips_repeated_call", "defers_half", "caches_result"):
        v = run("bias_grad_tall", (mutants / f"bias_grad_tall__{name}.cu").read_text(), quiet=True)
        assert v.status == "SLOW", (name, v.line)


@pytest.mark.skipif(ON_GPU, reason="drives the GPU-only speed path on the emulator with stand-ins")
def test_grading_process_speed_path(monkeypatch):
    """cudl.grade._child.grade's speed path, in this process: the cases on the emulator, then (as if on a GPU)
    the recorded sets, the timing loops (a stand-in timer) and the physical bound from stand-in ceilings. The
    solution ends with its timing and bound; a median under the bound is a FAIL verdict; a kernel that does
    half the work for an input it has seen does all of it (its variables are restored as loaded before every
    run), and, were they kept, would fail after a timed run."""
    import importlib

    import cudl
    from cudl.grade import Grader, _child

    g = REGISTRY["bias_grad_tall"]
    fake = Grader(**{**g.__dict__, "name": "_bias_grad_small",
                     "speed": dict(case=dict(rows=2000, cols=64), factor=2, bytes=4 * 2000 * 64),
                     "solution": dict(_solutions())["bias_grad_tall"]})
    monkeypatch.setitem(REGISTRY, "_bias_grad_small", fake)
    monkeypatch.setattr(importlib.import_module("cudl.bench"), "bench", _fake_bench(5))
    monkeypatch.setattr(importlib.import_module("cudl.ceilings"), "ceilings",
                        lambda: {"copy_gbps": 0.512, "gemm_tflops": {}})  # 512 kB in 1 ms
    done = {"flag": False}
    monkeypatch.setattr(cudl, "on_gpu", lambda: done["flag"])
    log = []  # the messages and, as "snapshot", each module_state call, in order
    speed = importlib.import_module("cudl.grade.speed")
    real_state = speed.module_state
    monkeypatch.setattr(speed, "module_state", lambda k: (log.append("snapshot"), real_state(k))[1])

    def grade(source: str) -> list:
        messages = []

        def send(kind, payload=None):
            messages.append((kind, payload))
            log.append(kind)
            done["flag"] = done["flag"] or kind == "done"
        done["flag"] = False
        _child.grade("_bias_grad_small", source, send, speed=True)
        return messages

    msgs = grade(fake.solution)
    assert log[:log.index("start")].count("snapshot") == len(fake.kernels)  # as loaded: before the first case
    kinds = [k for k, _ in msgs]
    assert kinds[-2:] == ["timing", "end"] and "done" in kinds, msgs[-3:]
    assert kinds[kinds.index("done"):].count("launch") == 2 * 3  # the speed case recorded 3 times for each kernel
    timing = msgs[-2][1]
    assert timing["student"] == [1.0] * 3 and timing["bound_ms"] == pytest.approx(1.0)
    v = _combine(fake, [Verdict("PASS", "PASS _bias_grad_small: 5/5 cases", timing=timing)], "")
    assert v.status == "PASS", v.line  # 1.0 ms against a bound of 1.0 ms
    timing["bound_ms"] = 2.0
    v = _combine(fake, [Verdict("PASS", "PASS _bias_grad_small: 5/5 cases", timing=timing)], "")
    assert v.status == "FAIL" and "faster than this GPU" in v.line, v.line
    defers = (ROOT / "tests/mutants/09-training/bias_grad_tall__defers_half.cu").read_text()
    defers = defers.replace("atomicAdd(&seen_ptr[i], 0ull) == (u64)dy && ", "")  # see by_content above
    msgs = grade(defers)  # every run starts from the module's variables as loaded: it does all the work
    assert [k for k, _ in msgs][-2:] == ["timing", "end"], msgs[-3:]
    from cudl.grade.speed import ModuleState

    monkeypatch.setattr(ModuleState, "restore", lambda self: None)  # kept: half a sum fails the check
    msgs = grade(defers)
    assert msgs[-1][0] == "fail" and "of a timing loop gave a wrong result" in msgs[-1][1][1], msgs[-1]
