"""Notebook maintenance for the book (run by `make sync` and `make execute`, not by readers).

    python -m cudl.nbtools sync       # md -> ipynb pairs, bootstrap cells, exercises from solutions
    python -m cudl.nbtools check      # pairs in sync, outputs not stale, exercises up to date
    python -m cudl.nbtools execute NB...  # run on a GPU, stamp the code hash, regenerate exercises
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from .compile import KERNELS_DIR, ROOT, local_includes
from .errors import CompileError

PAIRED_DIRS = ("chapters", "solutions")
BOOTSTRAP_MARK = "# cudl bootstrap"
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"


def repository_url() -> str:
    """`repository.url` from _config.yml: the one place the book's address is written."""
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def bootstrap_source(url: str) -> str:
    """The first code cell of every notebook: on Colab, fetch the book's code and install cudl."""
    return f'''{BOOTSTRAP_MARK} (written by `make sync` from _config.yml; on Colab it fetches the book's code)
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("cudl") is None and ("google.colab" in sys.modules or "CUDL_REPO_URL" in os.environ):
    repo = os.environ.get("CUDL_REPO_URL", "{url}")
    subprocess.run(["git", "clone", "-q", "--depth=1", repo, "cuda-for-dl"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "cuda-for-dl"], check=True)
    sys.path.insert(0, os.path.abspath("cuda-for-dl"))  # the running kernel does not see new .pth files
import cudl
cudl.setup()'''


def slug_of(path: Path) -> str:
    return path.stem


# ------------------------------------------------------------------------------ hashing

# A file of kernels_src/ named by its path in a string: "07-fusion/fused_rows.cu", '05-matmul/x.cu'.
_KERNEL_PATH = re.compile(r"""["'](\d\d-[\w-]+/[\w./-]+)["']""")


def kernel_files(nb: Any, slug: str, root: Path | None = None) -> list[Path]:
    """The files of kernels_src/ behind a notebook's outputs: the chapter's folder first, then, by name, the
    files of other chapters that its code cells, its folder's scripts or its grader module (cudl/grade/chNN.py)
    name by path (chapter 9 loads chapter 5's matmul), and every header these `#include`, recursively.
    `root`: the repository (default: this one; a copy in the tests)."""
    kernels = KERNELS_DIR if root is None else root / "kernels_src"
    kdir = kernels / slug
    own = [f for f in sorted(kdir.rglob("*")) if f.is_file() and "__pycache__" not in f.parts] if kdir.is_dir() else []
    texts = [c.source for c in nb.cells if c.cell_type == "code"]
    grader = (ROOT if root is None else root) / "cudl" / "grade" / f"ch{slug[:2]}.py"
    for f in [*own, *([grader] if grader.is_file() else [])]:
        if f.suffix in (".cu", ".cuh", ".h", ".py"):
            texts.append(f.read_text())
    extra: dict[str, Path] = {}
    for text in texts:
        for name in _KERNEL_PATH.findall(text):
            if (kernels / name).is_file():
                extra.setdefault(name, kernels / name)
    pending = [*texts, *(f.read_text() for f in extra.values() if f.suffix in (".cu", ".cuh", ".h"))]
    while pending:  # headers included by any of them (kernel sources in cells too), and by those headers
        try:
            found = local_includes(pending.pop(), "<notebook>", kernels)
        except CompileError:  # a missing header fails where the kernel is compiled, not here
            continue
        for name, path in found:
            if name not in extra:
                extra[name] = path
                pending.append(path.read_text())
    mine = {f.resolve() for f in own}
    return own + [extra[n] for n in sorted(extra) if extra[n].resolve() not in mine]


def code_hash(nb: Any, slug: str, root: Path | None = None) -> str:
    """Hash of what produced the outputs: every code cell and the kernel sources of kernel_files()."""
    kernels = KERNELS_DIR if root is None else root / "kernels_src"
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(cell.source.strip().encode() + b"\0")
    for f in kernel_files(nb, slug, root):
        h.update(f.relative_to(kernels).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def has_outputs(nb: Any) -> bool:
    return any(c.cell_type == "code" and c.get("outputs") for c in nb.cells)


# ------------------------------------------------------------------------------ exercises

_BEGIN = re.compile(r"^\s*(#|//|<!--)\s*BEGIN SOLUTION")
_END = re.compile(r"^\s*(#|//|<!--)\s*END SOLUTION")
_STUB = re.compile(r"^(\s*)(#|//)\s*STUB:\s?(.*)$")


def solution_lines(source: str) -> list[str]:
    """The code lines of a solution cell between BEGIN/END SOLUTION, without comments and whitespace, and only
    those long enough (12 characters) to give the solution away: what a hint must not contain."""
    out, inside = [], False
    for line in source.splitlines():
        if _BEGIN.match(line):
            inside = True
        elif _END.match(line):
            inside = False
        elif inside:
            code = re.sub(r"\s+", "", line.split("//")[0]).strip("{};")
            if len(code) >= 12:
                out.append(code)
    return out


def strip_solution(text: str) -> str:
    """Drop BEGIN/END SOLUTION blocks; turn `# STUB: code` / `// STUB: code` lines into `code`."""
    out, skipping = [], False
    for line in text.splitlines():
        if _BEGIN.match(line):
            skipping = True
        elif _END.match(line):
            skipping = False
        elif not skipping:
            m = _STUB.match(line)
            out.append(m.group(1) + m.group(3) if m else line)
    return "\n".join(out)


ANSWER_CELL = "*Write your answer here.*"
_GRADED = re.compile(r"^\s*cudl\.grade\.(\w+)\(", re.M)


def graded_name(cell: Any) -> str | None:
    """The grader a graded cell (`# NBVAL_CHECK_OUTPUT` + `cudl.grade.NAME(src)`) calls, else None."""
    if cell.cell_type != "code" or CHECK_MARK not in cell.source:
        return None
    m = _GRADED.search(cell.source)
    return m.group(1) if m else None


def solution_url(slug: str) -> str:
    """The solution notebook on the repository's web page (solutions/ are not part of the website)."""
    import yaml

    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    return f"{repo['url'].rstrip('/')}/blob/{repo.get('branch', 'main')}/solutions/{slug}.ipynb"


def _how_to_cell(slug: str) -> str:
    return (f"**How to work here.** Write each answer in the cell below its question and each kernel "
            f"in place of its `TODO`, then run the grader cell under it. A grader prints one line: `PASS`, or "
            f"`FAIL`/`CRASH`/`TIMEOUT` with the first case that went wrong and a first hint; "
            f"`cudl.grade.hint(\"NAME\", 2)` prints the next hint, and so on up to the last before the "
            f"solution. The line under each kernel that says *Expected output* is what a right kernel prints; "
            f"nothing below a grader cell is yours until you run it. When you are done, or stuck after the "
            f"last hint, compare with the solutions: [solutions/{slug}.ipynb]({solution_url(slug)}).")


def _expected_cell(name: str) -> str:
    """The note before a graded cell: the expected verdict (from the grader), its speed target, hints."""
    from . import grade

    grade._load_all()
    g = grade.REGISTRY[name]
    n = len(g.cases)
    text = f"> **Expected output** once your kernel is right: `PASS {name}: {n}/{n} cases`"
    if g.speed:
        case = ", ".join(f"{k}={v}" for k, v in g.speed["case"].items())
        text += (f"  \n> **Speed target** (graded on a GPU only): on the case {case}, at most "
                 f"{g.speed['factor']:g}× the time of the solution's kernel on the same GPU; a correct but "
                 f"slower kernel gets `SLOW`.")
    if len(g.hints) > 1:
        text += (f"  \n> **Hints**: a `FAIL` line gives the first of {len(g.hints)}; "
                 f"`cudl.grade.hint(\"{name}\", 2)` prints the second.")
    return text


def _new_markdown(text: str, after: Any) -> Any:
    """A generated markdown cell whose id derives from its neighbour's, so that regenerating is a no-op."""
    import nbformat

    cell = nbformat.v4.new_markdown_cell(text)
    key = after.get("id") or hashlib.sha256(after.source.encode()).hexdigest()
    cell["id"] = hashlib.sha256(f"{key}:{text}".encode()).hexdigest()[:8]
    return cell


def _with_answer_cells(cell: Any) -> list[Any]:
    """A markdown cell with theory answers, split after each answer, which becomes an answer cell."""
    out, chunk = [], []

    def flush(answered: bool) -> None:
        text = strip_solution("\n".join(chunk)).strip()
        if text:
            part = cell if not out else _new_markdown(text, out[-1])
            part.source = text
            out.append(part)
        if answered:
            out.append(_new_markdown(ANSWER_CELL, out[-1] if out else cell))
        chunk.clear()

    for line in cell.source.splitlines():
        chunk.append(line)
        if _END.match(line):
            flush(answered=True)
    flush(answered=False)
    return out


def exercise_from_solution(sol: Any) -> Any:
    """The exercise notebook: stubs instead of solutions, an answer cell after every theory question, the
    expected verdict (and speed target, hints) before every graded cell, a link to the solutions, and no
    outputs at all: whatever is printed under a cell is the student's own run."""
    slug = sol.metadata.get("cudl", {}).get("slug", "")
    ex = copy.deepcopy(sol)
    cells = []
    for i, cell in enumerate(ex.cells):
        if cell.cell_type == "markdown" and any(_BEGIN.match(line) for line in cell.source.splitlines()):
            cells.extend(_with_answer_cells(cell))
            continue
        cell.source = strip_solution(cell.source)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)  # the solution's run times: not the student's
            name = graded_name(cell)
            if name:
                cells.append(_new_markdown(_expected_cell(name), cell))
        cells.append(cell)
        if i == 0 and cell.cell_type == "markdown":
            cells.append(_new_markdown(_how_to_cell(slug), cell))
    ex.cells = cells
    ex.metadata.pop("jupytext", None)
    ex.metadata["cudl"] = {"generated_from": f"solutions/{slug}"}
    return ex


# ------------------------------------------------------------------------------ sync

def _read_md(path: Path) -> Any:
    import jupytext

    return jupytext.read(path)


def _write_ipynb(nb: Any, path: Path) -> None:
    import nbformat

    nbformat.write(nb, path)


def set_bootstrap(nb: Any, url: str) -> bool:
    """Make the first code cell the bootstrap cell; return True if it changed."""
    src = bootstrap_source(url)
    for cell in nb.cells:
        if cell.cell_type == "code":
            if cell.source.startswith(BOOTSTRAP_MARK):
                tags = cell.metadata.setdefault("tags", [])
                changed = cell.source != src or "hide-input" not in tags
                cell.source = src
                if "hide-input" not in tags:  # plumbing: folded away on the site, as d2l hides its setup
                    tags.append("hide-input")
                return changed
            break
    raise ValueError("the first code cell of a notebook must start with '# cudl bootstrap'")


def paired(root: Path = ROOT) -> list[tuple[Path, Path]]:
    return [(md, md.with_suffix(".ipynb")) for d in PAIRED_DIRS for md in sorted((root / d).glob("*.md"))]


def sync(root: Path = ROOT) -> None:
    """Write bootstrap cells into the .md sources, update the paired .ipynb, regenerate exercises."""
    import jupytext
    import nbformat
    from jupytext.combine import combine_inputs_with_outputs

    url = repository_url()
    for md, ipynb in paired(root):
        nb = _read_md(md)
        if set_bootstrap(nb, url):
            jupytext.write(nb, md, fmt="md:myst")
            nb = _read_md(md)
        if ipynb.exists():
            old = nbformat.read(ipynb, as_version=4)
            nb = combine_inputs_with_outputs(nb, old, fmt="md:myst")  # returns a new notebook
            nb.metadata["cudl"] = old.metadata.get("cudl", {})
            glue_markdown(nb)
        nb.metadata.setdefault("cudl", {})["slug"] = md.stem
        nb.metadata["jupytext"] = {"formats": "ipynb,md:myst"}
        _write_ipynb(nb, ipynb)
        if md.parent.name == "solutions":
            (root / "exercises").mkdir(exist_ok=True)
            _write_ipynb(exercise_from_solution(nb), root / "exercises" / ipynb.name)
        print(f"synced {ipynb.relative_to(root)}")


def _glue_without_markdown(nb: Any) -> Any:
    """(output data, key, text) of every glued text that holds a code span but has no text/markdown twin."""
    from .env import GLUE_MARKDOWN

    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            prefix = out.get("metadata", {}).get("scrapbook", {}).get("mime_prefix")
            text = out.get("data", {}).get(f"{prefix}text/plain") if prefix else None
            if isinstance(text, str) and GLUE_MARKDOWN in text and f"{prefix}text/markdown" not in out["data"]:
                yield out["data"], f"{prefix}text/markdown", text


def glue_markdown(nb: Any) -> int:
    """Give every glued text that holds a code span its text/markdown twin, as cudl.glue now stores it (a run
    stored before 2026-11-29 has text/plain only, which the site shows with its backticks). The same value in
    a second type: not a new measurement. Returns how many outputs it changed."""
    missing = list(_glue_without_markdown(nb))
    for data, key, text in missing:
        data[key] = text
    return len(missing)


# ------------------------------------------------------------------------------ check

def problems(root: Path = ROOT) -> list[str]:
    """Everything that makes the committed notebooks untrustworthy, as messages."""
    import nbformat

    out = []
    url = repository_url()
    for md, ipynb in paired(root):
        rel = ipynb.relative_to(root)
        if not ipynb.exists():
            out.append(f"{rel} is missing: run `make sync`")
            continue
        text_nb, nb = _read_md(md), nbformat.read(ipynb, as_version=4)
        a = [(c.cell_type, c.source.strip()) for c in text_nb.cells]
        b = [(c.cell_type, c.source.strip()) for c in nb.cells]
        if a != b:
            out.append(f"{rel} is out of sync with {md.name}: run `make sync`")
            continue
        boot = next((c.source for c in nb.cells if c.cell_type == "code"), "")
        if boot != bootstrap_source(url):
            out.append(f"{rel}: bootstrap cell differs from _config.yml's repository.url: run `make sync`")
        stamp = nb.metadata.get("cudl", {})
        if stamp.get("code_hash") and not has_outputs(nb):
            out.append(f"{rel} was executed on {stamp.get('executed_on')} but stores no outputs: restore them "
                       f"(git checkout) or re-execute on a GPU with `make execute`")
        if any(_glue_without_markdown(nb)):
            out.append(f"{rel}: a glued text with a code span has no text/markdown (the site would show its "
                       "backticks): run `make sync`")
        if has_outputs(nb) and stamp.get("code_hash") != (now := code_hash(nb, md.stem, root)):
            out.append(f"{rel}: stored outputs were produced by other code (hash {stamp.get('code_hash')}, "
                       f"now {now}): re-execute on a GPU with `make execute`")
        if md.parent.name == "solutions":
            ex_path = root / "exercises" / ipynb.name
            want = exercise_from_solution(nb)
            if not ex_path.exists():
                out.append(f"exercises/{ipynb.name} is missing: run `make sync`")
            else:
                have = nbformat.read(ex_path, as_version=4)
                if [(c.source, c.get("outputs")) for c in have.cells] != [(c.source, c.get("outputs"))
                                                                          for c in want.cells]:
                    out.append(f"exercises/{ipynb.name} differs from its solution: run `make sync`")
    return out


# ------------------------------------------------------------------------------ execute (GPU)

def _output_text(cell: Any) -> str:
    """A code cell's printed text and tracebacks, without terminal colours."""
    parts = []
    for o in cell.get("outputs", []):
        parts += [o.get("text", "")] if o.get("output_type") == "stream" else o.get("traceback", [])
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(parts))


def execute(paths: list[Path], timeout: int | None = None) -> None:
    """Run notebooks top to bottom (on a GPU), store outputs and stamp the hash of the code that made them.
    `timeout`: seconds a cell may take (default CUDL_CELL_TIMEOUT, else 600); each cell's time is printed."""
    import os
    import time

    import nbformat
    from nbclient import NotebookClient

    from .env import gpu_name
    from .mimicry import card

    if card():  # the kernels inherit CUDL_MIMIC: the stored outputs would be a mimic run's, labelled the real GPU's
        raise SystemExit(f"cudl.nbtools execute: unset CUDL_MIMIC (now {card()}): a notebook's stored outputs come "
                         "from a run on the real GPU; check a mimicked card with nbval instead")
    # A non-interactive backend in the environment (MPLBACKEND=Agg) would stop the kernel from showing figures inline.
    os.environ.pop("MPLBACKEND", None)
    timeout = timeout or int(os.environ.get("CUDL_CELL_TIMEOUT", "600"))
    failed = []
    for path in paths:
        path = path.resolve()
        nb = nbformat.read(path, as_version=4)
        started = {"notebook": time.time()}

        def cell_started(cell, cell_index, **_):
            started["cell"] = time.time()

        def cell_done(cell, cell_index, **_):  # progress, so that a run cut short shows where it was
            now = time.time()
            print(f"[{now - started['notebook']:6.0f} s] {path.name}: cell {cell_index} done in "
                  f"{now - started['cell']:.1f} s", flush=True)

        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", on_cell_start=cell_started,
                           on_cell_executed=cell_done,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except Exception as exc:  # keep going: one broken notebook should not cost the others' GPU time
            # A %%gpu cell's own error is printed in its outputs ("see the error above"): show them too.
            shown = "\n".join(_output_text(c) for c in nb.cells if c.get("cell_type") == "code"
                               and any(o.get("output_type") == "error" for o in c.get("outputs", [])))
            print(f"FAILED {path.name}: {shown[-6000:]}\n{str(exc)[-2000:]}", flush=True)
            failed.append(path.name)
            continue
        nb.metadata.setdefault("cudl", {}).update(
            slug=path.stem, code_hash=code_hash(nb, path.stem), executed_on=gpu_name(),
            executed=_dt.date.today().isoformat())
        _write_ipynb(nb, path)
        if path.parent.name == "solutions":
            _write_ipynb(exercise_from_solution(nb), path.parents[1] / "exercises" / path.name)
        print(f"executed {path.name} on {gpu_name()}", flush=True)
    if failed:
        raise SystemExit(f"{len(failed)} notebook(s) failed: {', '.join(failed)} (their old outputs are kept)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cudl.nbtools")
    ap.add_argument("command", choices=["sync", "check", "execute"])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--pack", type=Path, default=None,
                    help="execute: then write a .tgz of what a GPU run changes (see pack())")
    args = ap.parse_args(argv)
    if args.command == "sync":
        sync()
    elif args.command == "check":
        msgs = problems()
        for m in msgs:
            print(m)
        return 1 if msgs else 0
    else:
        paths = args.notebooks or [ipynb for _, ipynb in paired()]
        try:
            execute(paths)
        finally:  # a failed notebook keeps its old outputs; the others' new ones still travel back
            if args.pack:
                print(f"packed {pack(paths, args.pack)} files into {args.pack}")
    return 0


def pack(paths: list[Path], out: Path) -> int:
    """A .tgz (paths relative to the repository) of what executing `paths` on a GPU machine changes, to copy
    back over the working tree: the notebooks, the exercises made from solutions, and benchmarks/*.json
    (cudl.record's Scoreboard records, which a run of the notebooks writes there). Returns the file count."""
    import tarfile

    files = [p.resolve() for p in paths]
    files += [p.resolve().parents[1] / "exercises" / p.name for p in paths if p.resolve().parent.name == "solutions"]
    files += sorted((ROOT / "benchmarks").glob("*.json"))
    files = [f for f in files if f.is_file()]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=f.relative_to(ROOT).as_posix())
    return len(files)


if __name__ == "__main__":
    sys.exit(main())
