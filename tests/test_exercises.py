"""Exercise pages as a student meets them: no result they have not produced, an answer cell under every
question, one heading structure, the expected verdict (and speed target) above every grader, tiered hints
that do not give the solution away, a challenge per chapter, and a link to the solutions."""

from __future__ import annotations

import re

import nbformat
import pytest

from cudl import nbtools
from cudl.compile import ROOT
from cudl.grade import REGISTRY, _load_all

_load_all()
# Chapters whose exercises were written before this standard (issue 9): their structure, challenge and hint
# tests are strict xfails, so that meeting the standard turns them into failures to remove from this set.
BEFORE_THE_STANDARD: set[str] = set()
_LATE = pytest.mark.xfail(strict=True, reason="exercise written before the standard of issue 9 (headings, "
                                              "a speed-graded challenge, hint tiers)")


def _mark(path):
    return pytest.param(path, marks=_LATE) if path.stem in BEFORE_THE_STANDARD else path


EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


def _cells(path):
    return nbformat.read(path, as_version=4).cells


def _graded(cells):
    return [(i, nbtools.graded_name(c)) for i, c in enumerate(cells) if nbtools.graded_name(c)]


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_exercise_stores_no_outputs(path):
    """Whatever is printed under a cell of an exercise is the student's own run (the site shows no PASS)."""
    for c in _cells(path):
        if c.cell_type == "code":
            assert not c.outputs and c.execution_count is None, f"{path.name}: stored output under {c.source[:60]!r}"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_expected_verdict_is_labelled_above_each_grader(path):
    cells = _cells(path)
    graded = _graded(cells)
    assert graded, f"{path.name} has no graded cell"
    for i, name in graded:
        g = REGISTRY[name]
        note = cells[i - 1]
        assert note.cell_type == "markdown" and "**Expected output**" in note.source
        assert f"`PASS {name}: {len(g.cases)}/{len(g.cases)} cases`" in note.source
        assert ("**Speed target**" in note.source) == bool(g.speed)
        if len(g.hints) > 1:
            assert f'cudl.grade.hint("{name}", 2)' in note.source


@pytest.mark.parametrize("path", [_mark(p) for p in EXERCISES], ids=lambda p: p.stem)
def test_one_heading_structure_and_an_answer_cell_per_question(path):
    cells = _cells(path)
    n = int(path.stem[:2])
    sections = [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines()
                if line.startswith("## ")]
    assert sections == ["## Theory", "## Kernels", "## Challenge"], sections
    questions = exercises = 0
    section = None
    for i, c in enumerate(cells):
        if c.cell_type != "markdown":
            continue
        for line in c.source.splitlines():
            if line.startswith("## "):
                section = line[3:]
            m = re.match(r"### (Question|Exercise) (\d+)\.(\d+): \S", line)
            if line.startswith("### "):
                assert m, f"{path.name}: heading {line!r} is not '### Question|Exercise N.k: Title'"
                assert int(m.group(2)) == n, line
                if m.group(1) == "Question":
                    assert section == "Theory", line
                    questions += 1
                    assert int(m.group(3)) == questions, f"{line!r}: questions are numbered 1, 2, ..."
                    nxt = cells[i + 1]
                    assert nxt.cell_type == "markdown" and nxt.source == nbtools.ANSWER_CELL, line
                else:
                    assert section in ("Kernels", "Challenge"), line
                    exercises += 1
                    assert int(m.group(3)) == exercises, f"{line!r}: exercises are numbered 1, 2, ..."
                    rest = cells[i + 1:]
                    stop = next((j for j, d in enumerate(rest) if d.cell_type == "markdown"
                                 and d.source.startswith("#")), len(rest))
                    assert _graded(rest[:stop]), f"{path.name}: {line!r} has no graded cell"
    assert questions >= 1 and exercises >= 2
    assert sum(c.source == nbtools.ANSWER_CELL for c in cells) == questions


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_solutions_are_linked(path):
    how_to = _cells(path)[1].source
    url = nbtools.solution_url(path.stem)
    assert url in how_to and url.startswith(nbtools.repository_url())
    assert (ROOT / "solutions" / path.name).exists()


@pytest.mark.parametrize("path", [_mark(p) for p in EXERCISES], ids=lambda p: p.stem)
def test_each_chapter_has_a_speed_graded_challenge(path):
    cells = _cells(path)
    start = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "\n## Challenge" in "\n" + c.source)
    names = [name for _, name in _graded(cells[start:])]
    assert names, f"{path.name}: the challenge has no grader"
    for name in names:
        g = REGISTRY[name]
        assert g.speed and g.speed["case"] in g.cases and g.speed["factor"] > 1, name


GRADED_SOURCES = [pytest.param(p.stem, name, cells[i - 1].source, id=f"{p.stem}:{name}",
                               marks=[_LATE] if p.stem in BEFORE_THE_STANDARD else [])
                  for p in SOLUTIONS for cells in [_cells(p)] for i, name in _graded(cells)]


@pytest.mark.parametrize("slug,name,source", GRADED_SOURCES)
def test_hints_come_in_tiers_and_the_first_gives_no_solution_line(slug, name, source):
    g = REGISTRY[name]
    assert len(g.hints) >= 3, f"{name}: a pointer, more, nearly the answer"
    assert len(set(g.hints)) == len(g.hints)
    first = re.sub(r"\s+", "", g.hints[0])
    lines = nbtools.solution_lines(source)
    assert lines, f"{slug}: the cell before {name}'s grader should hold its solution"
    for line in lines:
        assert line not in first, f"the first hint of {name} contains the solution line {line!r}"


def test_answer_cells_split_a_cell_of_several_questions():
    nb = nbformat.v4.new_notebook(metadata={"cudl": {"slug": "99-test"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"),
                nbformat.v4.new_markdown_cell("### Question 1\n\nq1\n<!-- BEGIN SOLUTION -->\na1\n"
                                              "<!-- END SOLUTION -->\n\n### Question 2\nq2\n"
                                              "<!-- BEGIN SOLUTION -->\na2\n<!-- END SOLUTION -->\ntail")]
    ex = nbtools.exercise_from_solution(nb)
    texts = [c.source for c in ex.cells]
    assert texts[2:] == ["### Question 1\n\nq1", nbtools.ANSWER_CELL, "### Question 2\nq2", nbtools.ANSWER_CELL,
                         "tail"]
    assert "a1" not in "".join(texts) and "a2" not in "".join(texts)
    assert len({c.id for c in ex.cells}) == len(ex.cells)
    assert [c.id for c in nbtools.exercise_from_solution(nb).cells] == [c.id for c in ex.cells]  # stable ids
