"""Notebooks: pairs in sync, outputs not stale, exercises generated from solutions, and every stub FAILS."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cudl import nbtools
from cudl.compile import ROOT

EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_notebooks_are_in_sync_and_fresh():
    assert nbtools.problems() == []


def test_every_chapter_notebook_is_in_the_book():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        assert f"chapters/{nb.stem}" in toc
        assert f"exercises/{nb.stem}" in toc or not (ROOT / "exercises" / nb.name).exists()


def test_every_exercise_has_a_checked_pass_line():
    import nbformat

    for path in EXERCISES:
        nb = nbformat.read(path, as_version=4)
        checked = [c for c in nb.cells if c.cell_type == "code" and nbtools.CHECK_MARK in c.source]
        assert checked, f"{path.name} has no graded cell"
        for c in checked:
            text = "".join(o.get("text", "") for o in c.outputs)
            assert text.startswith("PASS "), f"{path.name}: stored output should be a PASS line, got {text!r}"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_exercise_stub_fails_its_grader(path):
    """The unsolved exercise must not pass nbval: a grader that passes a stub is vacuous."""
    env = dict(os.environ, CUDL_BACKEND=os.environ.get("CUDL_BACKEND", "emulator"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", "--nbval-cell-timeout=900", str(path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the stub of {path.name} passed its grader:\n{out[-3000:]}"
    assert "PASS" in out and ("FAIL " in out or "CRASH " in out or "TIMEOUT " in out or "Error" in out), out[-3000:]


def test_executed_chapters_show_their_figures():
    """A chapter that plots must store the images (a non-inline matplotlib backend once dropped them all)."""
    import nbformat

    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if not nbtools.has_outputs(nb) or not any("cudl.plots." in c.source or "plt." in c.source
                                                  for c in nb.cells if c.cell_type == "code"):
            continue
        images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if "image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})]
        assert images, f"{path.name} plots but stores no figure: re-execute it with `make execute`"
