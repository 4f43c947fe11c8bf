"""`python -m cudl.grade SUBMISSION.ipynb [more.ipynb | folder ...] [--csv out.csv]`: grade submitted notebooks.

The notebooks are never executed: the kernel source of each graded cell is read with `ast` (string literals
only, see cudl.grade.extract) and graded by the installed graders, each in a fresh process. A notebook whose
graded cell is missing, or whose source is not a string literal, gets a FAIL line for that grader. Prints
the verdict lines of each file; `--csv` writes one row per (file, grader): file, grader, verdict, detail.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from . import REGISTRY, _load_all, run
from .extract import graded_sources
from .speed import SOLUTIONS_DIR


def expected_graders(path: Path) -> list[str]:
    """The graders of the solution notebook with the same name (none if there is no such solution)."""
    sol = SOLUTIONS_DIR / path.name
    return [c.grader for c in graded_sources(sol)] if sol.is_file() else []


def grade_notebook(path: Path) -> list[tuple[str, str, str]]:
    """(grader, status, verdict line) for every graded cell of `path` and every expected one it lacks."""
    rows = []
    try:
        found = graded_sources(path)
    except (OSError, ValueError) as exc:  # not a notebook, or truncated JSON
        return [("", "FAIL", f"FAIL: cannot read {path.name} as a notebook ({type(exc).__name__}: {exc})")]
    for cell in found:
        if cell.grader not in REGISTRY:
            rows.append((cell.grader, "FAIL", f"FAIL {cell.grader}: no such grader (cudl.grade.{cell.grader})"))
        elif cell.source is None:
            rows.append((cell.grader, "FAIL", f"FAIL {cell.grader}: missing: {cell.problem}"))
        else:
            v = run(cell.grader, cell.source, quiet=True)
            assert v is not None
            rows.append((cell.grader, v.status, v.line))
    names = {c.grader for c in found}
    for name in expected_graders(path):
        if name not in names:
            rows.append((name, "FAIL", f"FAIL {name}: missing: no graded cell (# NBVAL_CHECK_OUTPUT) calls "
                                       f"cudl.grade.{name}"))
    return rows


def notebooks(paths: list[str]) -> list[Path]:
    """The .ipynb files named, folders searched recursively (checkpoints skipped)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in f.parts)
        elif p.is_file():
            out.append(p)
        else:
            raise SystemExit(f"no such file or folder: {p}")
    return out


def main(argv: list[str] | None = None) -> int:
    """Grade every notebook, print its verdicts, write the CSV; exit status 1 unless everything passed."""
    ap = argparse.ArgumentParser(prog="python -m cudl.grade", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="submitted .ipynb files or folders holding them")
    ap.add_argument("--csv", help="write one row per graded kernel: file, grader, verdict, detail")
    args = ap.parse_args(argv)
    _load_all()
    table = []
    for nb in notebooks(args.paths):
        print(nb, flush=True)
        rows = grade_notebook(nb)
        if not rows:
            rows = [("", "FAIL", "FAIL: no graded cell found")]
        for grader, status, line in rows:
            print(f"  {line}", flush=True)
            table.append((str(nb), grader, status, line))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["file", "grader", "verdict", "detail"])
            w.writerows(table)
    return 0 if table and all(row[2] == "PASS" for row in table) else 1


if __name__ == "__main__":
    sys.exit(main())
