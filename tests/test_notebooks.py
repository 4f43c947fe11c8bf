"""Notebooks: pairs in sync, outputs not stale, exercises generated from solutions, and every stub FAILS."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from cudl import nbtools
from cudl.compile import ROOT

EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_notebooks_are_in_sync_and_fresh():
    assert nbtools.problems() == []


def _copy_of_chapter(slug: str, dest) -> None:
    """What problems() reads of one executed chapter, copied under `dest`: its .md/.ipynb pair, kernels_src/
    (the notebook may load files of other chapters) and its grader module (which may name kernels too)."""
    import shutil

    (dest / "chapters").mkdir()
    for ext in (".md", ".ipynb"):
        shutil.copy(ROOT / "chapters" / f"{slug}{ext}", dest / "chapters")
    shutil.copytree(ROOT / "kernels_src", dest / "kernels_src", ignore=shutil.ignore_patterns("__pycache__"))
    grader = ROOT / "cudl" / "grade" / f"ch{slug[:2]}.py"
    if grader.is_file():
        (dest / "cudl" / "grade").mkdir(parents=True)
        shutil.copy(grader, dest / "cudl" / "grade")


def _stale(problems: list[str], slug: str) -> bool:
    return any(p.startswith(f"chapters/{slug}.ipynb: stored outputs were produced by other code") for p in problems)


def test_stale_guard_catches_an_edited_code_cell(tmp_path):
    """The guard must compare the stored hash with the code as it is now: edit one code cell of an executed
    chapter (in both halves of the pair, so that it stays in sync) and the copy must be reported stale."""
    import nbformat

    slug = "01-first-kernel"
    _copy_of_chapter(slug, tmp_path)
    assert nbtools.problems(tmp_path) == []  # the copy is as fresh as the original
    md, ipynb = tmp_path / "chapters" / f"{slug}.md", tmp_path / "chapters" / f"{slug}.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    assert nbtools.has_outputs(nb) and nb.metadata["cudl"]["code_hash"]
    cell = [c for c in nb.cells if c.cell_type == "code" and c.source.strip() in md.read_text()][-1]
    text = md.read_text()
    assert text.count(cell.source.strip()) == 1
    md.write_text(text.replace(cell.source.strip(), cell.source.strip() + "\nn_edited = 1"))
    cell.source = cell.source.strip() + "\nn_edited = 1"
    nbformat.write(nb, ipynb)
    found = nbtools.problems(tmp_path)
    assert _stale(found, slug) and len(found) == 1, found


@pytest.mark.parametrize("slug, which", [("01-first-kernel", "own"), ("12-flash-attention", "other chapter's")])
def test_stale_guard_catches_an_edited_kernel(tmp_path, slug, which):
    """A comment added to a kernel file the notebook's outputs came from (its own chapter's, or a header of
    another chapter that it includes) makes it stale; the same edit to a file it does not use does not."""
    import nbformat

    _copy_of_chapter(slug, tmp_path)
    nb = nbformat.read(tmp_path / "chapters" / f"{slug}.ipynb", as_version=4)
    kernels = tmp_path / "kernels_src"
    used = [f.relative_to(kernels).as_posix() for f in nbtools.kernel_files(nb, slug, tmp_path)]
    mine = [f for f in used if f.startswith(f"{slug}/")]
    edited = mine[0] if which == "own" else next(f for f in used if not f.startswith(f"{slug}/"))
    unused = next(f.relative_to(kernels).as_posix() for f in sorted(kernels.rglob("*.cu"))
                  if f.relative_to(kernels).as_posix() not in used)
    assert nbtools.problems(tmp_path) == []
    with open(kernels / unused, "a") as f:
        f.write("// an edit elsewhere\n")
    assert nbtools.problems(tmp_path) == []
    with open(kernels / edited, "a") as f:
        f.write("// an edit\n")
    found = nbtools.problems(tmp_path)
    assert _stale(found, slug) and len(found) == 1, (edited, found)


def test_every_chapter_notebook_is_in_the_book():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        assert f"chapters/{nb.stem}" in toc
        assert f"exercises/{nb.stem}" in toc or not (ROOT / "exercises" / nb.name).exists()


def test_every_executed_solution_stores_pass_lines():
    """The solutions carry a GPU run's PASS lines (nbval compares them); exercises carry no outputs at all."""
    import nbformat

    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if not nbtools.has_outputs(nb):
            continue
        checked = [c for c in nb.cells if nbtools.graded_name(c)]
        assert checked, f"{path.name} has no graded cell"
        for c in checked:
            text = "".join(o.get("text", "") for o in c.outputs)
            assert text.startswith("PASS "), f"{path.name}: stored output should be a PASS line, got {text!r}"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_every_exercise_stub_fails_its_grader(path, monkeypatch):
    """Run the unsolved exercise top to bottom: every grader must refuse its stub (a grader that passes a stub
    is vacuous), and nbval must refuse the notebook."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("CUDL_BACKEND", os.environ.get("CUDL_BACKEND", "emulator"))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    graded = [(nbtools.graded_name(c), c) for c in nb.cells if nbtools.graded_name(c)]
    assert graded
    for name, cell in graded:
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert text.startswith((f"FAIL {name}", f"CRASH {name}", f"TIMEOUT {name}")), f"{name}: {text[-500:]!r}"


def _nbval(path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDL_BACKEND=os.environ.get("CUDL_BACKEND", "emulator"))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", "--nbval-cell-timeout=900", str(path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)


def test_nbval_refuses_a_submission_that_stores_its_own_fail(tmp_path):
    """An instructor runs nbval on a student's executed notebook: its stored output is the student's own, so
    a deterministic FAIL (here: does not compile) stored and re-run must still fail."""
    import nbformat

    from cudl.grade import run

    src = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { y[i] = 0; }'
    verdict = run("saxpy", src, quiet=True)
    printed = verdict.line + "\n" + (verdict.detail + "\n" if verdict.detail else "")  # what the cell prints
    assert verdict.line.startswith("FAIL saxpy: does not compile")
    assert run("saxpy", src, quiet=True).line == verdict.line  # deterministic: the re-run prints the same
    graded = nbformat.v4.new_code_cell(f"{nbtools.CHECK_MARK}\ncudl.grade.saxpy(saxpy_src)")
    graded.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import cudl"), nbformat.v4.new_code_cell(f"saxpy_src = {src!r}"), graded]
    for k, cell in enumerate(nb.cells, 1):  # as the student's run left them
        cell.execution_count = k
    nbformat.write(nb, tmp_path / "submission.ipynb")
    proc = _nbval(tmp_path / "submission.ipynb")
    assert proc.returncode != 0, proc.stdout[-2000:]


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


def test_nbval_refuses_an_unsolved_exercise(tmp_path):
    """Exercises ship without outputs, and nbval compares nothing in a cell that was never run: only a grader
    cell that fails (raises) on a non-PASS verdict makes nbval refuse the stubs. The first exercise up to its
    first grader cell shows it (test_every_exercise_stub_fails_its_grader runs every exercise whole), and the
    one cell that fails must be the grader's."""
    import nbformat

    nb = nbformat.read(EXERCISES[0], as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if nbtools.graded_name(c))
    nb.cells = nb.cells[:first + 1]
    nbformat.write(nb, tmp_path / "cut.ipynb")
    proc = _nbval(tmp_path / "cut.ipynb")
    assert proc.returncode != 0, proc.stdout[-2000:]
    name = nbtools.graded_name(nb.cells[-1])
    assert re.search(r"^1 failed, \d+ passed", proc.stdout, re.M) and f"NotPassed: {name}: FAIL" in proc.stdout, \
        proc.stdout[-3000:]


def test_glued_code_spans_render_as_markdown(monkeypatch):
    """A glued sentence that names `long_scoreboard` must reach the site as Markdown: {glue:} shows text/plain
    literally, backticks and all. cudl.glue stores the twin; nbtools.glue_markdown adds it to older runs."""
    import IPython.display
    import nbformat

    import cudl

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda data, **kw: shown.append((data, kw)))
    cudl.glue("plain", 1.5, ".2f")
    cudl.glue("code", "the top stall is `long_scoreboard`")
    prefix = "application/papermill.record/"
    assert set(shown[0][0]) == {prefix + "text/plain"} and shown[0][0][prefix + "text/plain"] == "1.50"
    assert shown[1][0][prefix + "text/markdown"] == shown[1][0][prefix + "text/plain"]

    def output(text):
        return nbformat.v4.new_output("display_data", data={prefix + "text/plain": text},
                                      metadata={"scrapbook": {"name": "x", "mime_prefix": prefix}})

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "x", outputs=[output("see `k`"), output("2.0"), nbformat.v4.new_output("stream", text="`not glue`")])])
    assert nbtools.glue_markdown(nb) == 1
    first, second = (o["data"] for o in nb.cells[0].outputs[:2])
    assert first[prefix + "text/markdown"] == "see `k`" and prefix + "text/markdown" not in second
    assert nbtools.glue_markdown(nb) == 0  # once


def test_pack_holds_what_a_gpu_run_changes(tmp_path):
    """`nbtools execute ... --pack F`: the executed notebooks, the exercises made from executed solutions and
    the Scoreboard's records (benchmarks/*.json), under their paths in the repository."""
    import tarfile

    out = tmp_path / "run.tgz"
    n = nbtools.pack([ROOT / "chapters" / "01-first-kernel.ipynb", ROOT / "solutions" / "13-quantization.ipynb"], out)
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    records = {f"benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.json")}
    assert records, "no Scoreboard records in benchmarks/"
    assert names == {"chapters/01-first-kernel.ipynb", "solutions/13-quantization.ipynb",
                     "exercises/13-quantization.ipynb", *records} and n == len(names)
