"""Exercise graders: run a student's kernel on fresh random cases in a child process with a time limit.

Each grader prints exactly one verdict line, which nbval compares with the stored one:
    PASS saxpy: 6/6 cases
    FAIL saxpy: case 3/6 (n=1000): 12 of 1000 elements wrong; worst at [17]: got 3.0, expected 2.5. Hint: ...
    TIMEOUT saxpy: case 2/6 (n=31) still running after 20 s. Hint: ...
    CRASH saxpy: case 2/6 (n=31): out-of-bounds write to y[31] by thread (31,0,0) of block (0,0,0)
Graders live in `cudl/grade/chNN.py`, one module per chapter, and register themselves with `@grader`.
Call one as `cudl.grade.saxpy(source)` or `cudl.grade.run("saxpy", source)`.
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing as mp
import os
import pkgutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# (outputs, references) pairs a case returns; each pair is compared with cudl.check.compare.
Pairs = Sequence[tuple[Any, Any]]


class Refuse(Exception):
    """Raised by a grader's `run` for a kernel that computes the right numbers the wrong way (uncoalesced,
    bank-conflicted, one thread doing all the work): the message becomes the FAIL line's reason."""


@dataclass
class Grader:
    name: str
    kernels: tuple[str, ...]  # kernel names the student's source must define (compiled before timing starts)
    cases: list[dict[str, Any]]  # GPU cases; the first ones are the edge cases
    emulator_cases: list[dict[str, Any]]
    run: Callable[[Callable[[str], Any], dict[str, Any]], Pairs]
    hints: tuple[str, ...]  # tiers: the FAIL line gives the first, cudl.grade.hint(name, k) the k-th
    rtol: float | None = None
    time_limit: float | None = None  # seconds for all cases together, after compilation
    options: tuple[str, ...] = field(default_factory=tuple)
    # Speed-graded exercises: dict(case={...}, factor=F): on a GPU, a correct kernel slower than F times the
    # solution's time on that case gets SLOW instead of PASS.
    speed: dict[str, Any] | None = None

    @property
    def hint(self) -> str:
        return self.hints[0] if self.hints else ""


REGISTRY: dict[str, Grader] = {}


def grader(name: str, *, kernels: Sequence[str], cases: list[dict[str, Any]],
           emulator_cases: list[dict[str, Any]] | None = None, hint: str | Sequence[str] = "",
           rtol: float | None = None, time_limit: float | None = None,
           speed: dict[str, Any] | None = None) -> Callable:
    """Register `run(load, case) -> [(out, ref), ...]` as the grader `name`.

    `hint` is one string or a list of tiers, from a pointer to nearly the answer (the solution is the last step).
    """
    if emulator_cases is not None and len(emulator_cases) != len(cases):
        raise ValueError(f"grader {name}: the stored PASS line counts cases, so both backends need as many")
    hints = (hint,) if isinstance(hint, str) else tuple(hint)

    def wrap(fn: Callable) -> Callable:
        REGISTRY[name] = Grader(name, tuple(kernels), cases, emulator_cases or cases, fn, hints, rtol, time_limit,
                                speed=speed)
        return fn
    return wrap


def hint(name: str, level: int = 2) -> None:
    """Print hint tier `level` (1 = the pointer in the FAIL line) of grader `name`."""
    _load_all()
    if name not in REGISTRY:
        raise KeyError(f"no grader {name!r}; known: {', '.join(sorted(REGISTRY))}")
    hints = REGISTRY[name].hints
    if not hints:
        print(f"{name}: no hints")
        return
    k = max(1, min(level, len(hints)))
    more = (f" (cudl.grade.hint({name!r}, {k + 1}) gives more)" if k < len(hints)
            else " (that is the last hint: next is the solution notebook)")
    print(f"Hint {k}/{len(hints)} for {name}: {hints[k - 1]}{more}")


def _describe(case: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in case.items() if not k.startswith("_"))


# ------------------------------------------------------------------------------ child process

def _child(name: str, source: str, backend: str, conn: Any) -> None:
    os.environ["CUDL_BACKEND"] = backend
    import cudl
    from cudl.check import compare
    from cudl.errors import CompileError, EmulatorUnsupported, KernelFault

    _load_all()
    g = REGISTRY[name]
    try:
        kernels = {k: cudl.load(source, k, options=g.options) for k in g.kernels}
    except CompileError as exc:
        conn.send(("compile", str(exc)))
        return
    except EmulatorUnsupported as exc:  # cannot be graded here at all: say so, do not call it a crash
        conn.send(("unsupported", str(exc)))
        return
    conn.send(("compiled", None))

    def load(kname: str) -> Any:
        return kernels[kname] if kname in kernels else cudl.load(source, kname, options=g.options)

    cases = g.cases if cudl.on_gpu() else g.emulator_cases
    for i, case in enumerate(cases):
        conn.send(("start", i))
        try:
            pairs = g.run(load, dict(case))
            cudl.sync()
            for out, ref in pairs:
                c = compare(out, ref, rtol=g.rtol)
                if not c.ok:
                    conn.send(("fail", (i, str(c))))
                    return
        except KernelFault as exc:
            conn.send(("crash", (i, str(exc))))
            return
        except Refuse as exc:
            conn.send(("fail", (i, str(exc))))
            return
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            kind = "crash" if any(s in text for s in ("IllegalAddress", "illegal", "LaunchFailure", "misaligned",
                                                      "cudaError")) else "error"
            conn.send((kind, (i, text if kind == "crash" else traceback.format_exc(limit=3))))
            return
    conn.send(("done", len(cases)))


# ------------------------------------------------------------------------------ parent

@dataclass
class Verdict:
    status: str  # PASS FAIL TIMEOUT CRASH
    line: str
    detail: str = ""

    def __bool__(self) -> bool:
        return self.status == "PASS"

    def __repr__(self) -> str:
        return self.line


def run(name: str, source: str, *, time_limit: float | None = None, quiet: bool = False) -> Verdict | None:
    """Grade `source` with grader `name` and print the verdict line (return it instead when `quiet`)."""
    from ..backend import backend, on_gpu

    _load_all()
    if name not in REGISTRY:
        raise KeyError(f"no grader {name!r}; known: {', '.join(sorted(REGISTRY))}")
    g = REGISTRY[name]
    cases = g.cases if on_gpu() else g.emulator_cases
    limit = time_limit or g.time_limit or (30.0 if on_gpu() else 90.0)
    ctx = mp.get_context("spawn")  # a fresh process: a crashed CUDA context cannot poison the notebook's
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(name, source, backend(), child), daemon=True)
    proc.start()
    child.close()
    verdict = _collect(g, cases, proc, parent, limit)
    proc.join(timeout=5)
    if proc.is_alive():
        proc.kill()
    if quiet:
        return verdict
    print(verdict.line)
    if verdict.detail:
        print(verdict.detail)
    return None


def _collect(g: Grader, cases: list[dict[str, Any]], proc: Any, conn: Any, limit: float) -> Verdict:
    n = len(cases)
    current = -1
    deadline = time.monotonic() + 300  # compiling (g++ on the emulator, NVRTC on a GPU) gets its own budget

    def where(i: int) -> str:
        return f"case {i + 1}/{n} ({_describe(cases[i])})" if 0 <= i < n else "before the first case"

    hint = f" Hint: {g.hint}" if g.hint else ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not conn.poll(min(remaining, 0.5)):
            if remaining <= 0:
                proc.kill()
                return Verdict("TIMEOUT", f"TIMEOUT {g.name}: {where(current)} still running after {limit:.0f} s."
                               f" Hint: does every thread leave its loops, and does every thread reach each "
                               f"__syncthreads()?")
            if not proc.is_alive() and not conn.poll():
                code = proc.exitcode
                return Verdict("CRASH", f"CRASH {g.name}: {where(current)}: the grading process died "
                               f"(exit code {code}); the kernel probably accessed memory it does not own.{hint}")
            continue
        try:
            kind, payload = conn.recv()
        except EOFError:
            continue
        if kind == "compile":
            first = next((ln for ln in payload.splitlines()[1:] if "error" in ln), payload.splitlines()[0])
            return Verdict("FAIL", f"FAIL {g.name}: does not compile: {first.strip()}", payload)
        if kind == "unsupported":
            return Verdict("FAIL", f"FAIL {g.name}: cannot be graded on the CPU emulator: {payload.splitlines()[0]}")
        if kind == "compiled":
            deadline = time.monotonic() + limit
        elif kind == "start":
            current = payload
        elif kind == "fail":
            i, msg = payload
            return Verdict("FAIL", f"FAIL {g.name}: {where(i)}: {msg}.{hint}")
        elif kind == "crash":
            i, msg = payload
            return Verdict("CRASH", f"CRASH {g.name}: {where(i)}: {msg.strip().splitlines()[-1]}")
        elif kind == "error":
            i, msg = payload
            last = msg.strip().splitlines()[-1]
            return Verdict("FAIL", f"FAIL {g.name}: {where(i)}: {last}", msg)
        elif kind == "done":
            return Verdict("PASS", f"PASS {g.name}: {payload}/{payload} cases")


@functools.lru_cache(maxsize=1)
def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{mod.name}")


def __getattr__(name: str) -> Callable[..., Verdict | None]:
    if name.startswith("__"):
        raise AttributeError(name)
    _load_all()
    if name in REGISTRY:
        return functools.partial(run, name)
    raise AttributeError(f"cudl.grade has no grader {name!r}")
