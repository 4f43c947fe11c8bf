"""One GPU job for the graders (issue 7): run it as `CUDL_BACKEND=gpu python3 tests/grade_gpu_check.py`.

(a) every published solution PASSes, cross-checked on the emulator, with its slowest launch; (b) every exercise
stub and every mutant is refused; (c) the speed-graded copy of block_sum: the solution against itself PASSes,
a serial kernel is SLOW; (d) a hung kernel is reported, and how long that took. Prints a short table last.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["CUDL_GRADE_MODULES"] = "tests.grade_fixtures"

import cudl  # noqa: E402
from cudl.grade import run  # noqa: E402
from cudl.grade.extract import graded_sources  # noqa: E402


def timed(name: str, src: str) -> tuple[str, object, float]:
    t0 = time.monotonic()
    v = run(name, src, quiet=True)
    return name, v, time.monotonic() - t0


def main() -> None:
    cudl.setup()
    sols = [(c.grader, c.source) for nb in sorted((ROOT / "solutions").glob("*.ipynb")) for c in graded_sources(nb)]
    stubs = [(c.grader, c.source) for nb in sorted((ROOT / "exercises").glob("*.ipynb")) for c in graded_sources(nb)]
    mutants = sorted((ROOT / "tests" / "mutants").rglob("*.cu"))
    t0 = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        sol_res = list(pool.map(lambda a: timed(*a), sols))
        stub_res = list(pool.map(lambda a: timed(*a), stubs))
        mut_res = list(pool.map(lambda p: (p.stem, *timed(p.name.split("__")[0], p.read_text())[1:]), mutants))
    print(f"graded {len(sols) + len(stubs) + len(mutants)} sources in {time.monotonic() - t0:.0f} s (6 at a time)")
    for name, v, dt in sol_res:
        print(f"solution {name:22s} {v.line[:110]} | slowest launch {1e3 * v.slowest_launch_s:.1f} ms | {dt:.1f} s")
    bad_stubs = [(n, v.line) for n, v, _ in stub_res if v.status == "PASS"]
    print(f"stubs refused: {len(stub_res) - len(bad_stubs)}/{len(stub_res)} {bad_stubs}")
    for stem, v, _ in mut_res:
        if v.status == "PASS" or stem.startswith("block_sum__"):
            print(f"mutant {stem:34s} {v.line[:150]}")
    passed = [stem for stem, v, _ in mut_res if v.status == "PASS"]
    print(f"mutants refused: {len(mut_res) - len(passed)}/{len(mut_res)}; passed: {passed}")

    from tests.grade_fixtures import SERIAL_BLOCK_SUM

    sol = cudl.grade.REGISTRY["block_sum_timed"].solution
    for label, src in [("solution vs itself", sol), ("solution vs itself", sol), ("solution vs itself", sol),
                       ("serial kernel", SERIAL_BLOCK_SUM)]:
        _, v, dt = timed("block_sum_timed", src)
        t = v.timing or {}
        print(f"speed {label:20s} {v.status:5s} student {t.get('student')} solution {t.get('solution')} ms "
              f"| {v.line[:120]} | {dt:.1f} s")

    hang = ('extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {\n'
            "    volatile float* p = y;  // a volatile global read: no compiler may drop the loop\n"
           "    while (p[0] == p[0]) { }\n}\n")
    _, v, dt = timed("saxpy", hang)
    print(f"hung kernel: {v.status} after {dt:.1f} s: {v.line[:140]}")


if __name__ == "__main__":
    main()
