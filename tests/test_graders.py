"""Graders are not vacuous: enough cases with edge sizes, and every mutant kernel is refused.

Runs on the current backend: the CPU emulator in CI, the GPU under `make gpu-test`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudl.grade import REGISTRY, _load_all, run

_load_all()
MUTANTS = sorted((Path(__file__).parent / "mutants").rglob("*.cu"))


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
    verdict = run(name, path.read_text(), quiet=True)
    print(verdict.line)
    assert verdict.status in ("FAIL", "CRASH", "TIMEOUT"), verdict.line


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
