"""Grades every speed-graded challenge's solution and its slow-but-correct variants
(tests/gpu/slow_variants/NN-slug/<grader>__<variant>.cu) with the graders themselves, on a GPU, to check
their `speed` factors: every solution PASSes, and a clearly naive variant gets SLOW.
Run: CUDL_BACKEND=gpu python tests/gpu/time_challenges.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cudl.grade import REGISTRY, _load_all, run  # noqa: E402
from cudl.grade.extract import graded_sources  # noqa: E402

VARIANTS = Path(__file__).parent / "slow_variants"


def challenges() -> list[tuple[str, str, str]]:
    """(grader, chapter slug, solution source) of every graded cell whose grader declares `speed`."""
    _load_all()
    return [(c.grader, nb.stem, c.source) for nb in sorted((ROOT / "solutions").glob("*.ipynb"))
            for c in graded_sources(nb) if REGISTRY[c.grader].speed]


def main() -> None:
    rows = []
    for name, slug, src in challenges():
        slow = sorted((VARIANTS / slug).glob(f"{name}__*.cu"))
        for label, source in [("solution", src)] + [(p.stem.split("__")[1], p.read_text()) for p in slow]:
            # speed only: the CPU emulator's cross-check (on by default on a GPU) is not what this script is
            # for, and adds a g++ build and a CPU run to every grading (with it, 5 gradings took 200 s on an
            # H200 and the list never finished inside one device call)
            v = run(name, source, quiet=True, cross_check=False)
            print(v.line, flush=True)
            t = v.timing or {}
            ratio = (min(t["student"]) / min(t["solution"])) if t.get("student") and t.get("solution") else None
            rows.append((name, label, v.status, ratio))
    print(f"\n{'grader':<20} {'variant':<22} {'verdict':<8} {'x solution':>10}  (factor)")
    for name, label, status, ratio in rows:
        r = f"{ratio:10.2f}" if ratio is not None else f"{'-':>10}"
        print(f"{name:<20} {label:<22} {status:<8} {r}  ({REGISTRY[name].speed['factor']:g})")


if __name__ == "__main__":
    main()
