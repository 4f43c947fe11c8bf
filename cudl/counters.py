"""Memory counters without a GPU: `cudl.counters(kernel, grid, block, args)` runs one launch on the CPU emulator
with every load and store recorded, and returns a small table:

* global memory: 32-byte sectors per warp request (a fully coalesced 4-byte load by 32 lanes touches 4);
* shared memory: wavefronts per warp request and bank conflicts (32 banks of 4-byte words; n-way);
* work balance: memory accesses per thread (min / median / max over the grid).

A "request" is what one warp-level load or store instruction asks for. The emulator runs a warp's lanes one
after another, so it groups them: the k-th access at one source location (call site) by each lane of a warp
is one request. Lanes that run a loop a different number of times, or that diverge, are grouped as if they
had run together; for the book's kernels this is what the hardware does. Accesses of 8 or 16 bytes per lane
are counted like the GPU's: distinct sectors (global), distinct words per bank (shared).

The counts do not need a GPU: on a GPU backend the kernel is still counted on the emulator (it needs g++).
Graders: `cudl.counters(...)` returns a `Counters`; its `global_sectors_per_request("load")`,
`shared_ways("load")` and `thread_accesses` are plain numbers to compare; `cudl.counters.last()` is the
table of the last call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import backend as _backend
from .compile import ROOT, resolve
from .errors import EmulatorUnsupported
from .kernel import SCALAR_TYPES, Kernel, _dim3


@dataclass
class Counters:
    """Counts of one launch; rows are per source line, space (global/shared) and op (load/store)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    rows: list[dict[str, Any]]
    per_thread: np.ndarray = field(repr=False)
    note: str = ""

    def _sum(self, space: str, op: str | None, key: str) -> int:
        return sum(r[key] for r in self.rows if r["space"] == space and (op is None or r["op"] == op))

    def requests(self, space: str = "global", op: str | None = None) -> int:
        return self._sum(space, op, "requests")

    def global_sectors_per_request(self, op: str | None = None) -> float:
        """32-byte sectors per warp request (loads, stores or both); 4 is ideal for 4-byte words."""
        n = self._sum("global", op, "requests")
        return self._sum("global", op, "units") / n if n else float("nan")

    def global_efficiency(self, op: str | None = None) -> float:
        """Bytes the lanes asked for / bytes of the sectors moved (1.0: fully coalesced)."""
        u = self._sum("global", op, "units")
        return self._sum("global", op, "ideal") / u if u else float("nan")

    def shared_wavefronts_per_request(self, op: str | None = None) -> float:
        n = self._sum("shared", op, "requests")
        return self._sum("shared", op, "units") / n if n else float("nan")

    def shared_conflicts_per_request(self, op: str | None = None) -> float:
        """Extra wavefronts per request caused by bank conflicts (0: conflict-free)."""
        n = self._sum("shared", op, "requests")
        return (self._sum("shared", op, "units") - self._sum("shared", op, "ideal")) / n if n else float("nan")

    def shared_ways(self, op: str | None = None) -> float:
        """n of an n-way bank conflict, averaged over requests (1.0: conflict-free)."""
        i = self._sum("shared", op, "ideal")
        return self._sum("shared", op, "units") / i if i else float("nan")

    @property
    def thread_accesses(self) -> tuple[int, float, int]:
        """(min, median, max) loads+stores+atomics per thread over the whole grid."""
        a = self.per_thread
        if a.size == 0:
            return (0, 0.0, 0)
        return (int(a.min()), float(np.median(a)), int(a.max()))

    def _table(self) -> tuple[list[str], list[list[str]]]:
        head = ["line", "memory", "op", "requests", "per request", "efficiency / conflicts"]
        body = []
        for r in self.rows:
            per = r["units"] / r["requests"] if r["requests"] else 0.0
            if r["space"] == "global":
                eff = r["ideal"] / r["units"] if r["units"] else 1.0
                body.append([r["line"], "global", r["op"], f"{r['requests']:,}", f"{per:.2f} sectors",
                             f"{100 * eff:.0f}% of sector bytes used"])
            else:
                ways = r["units"] / r["ideal"] if r["ideal"] else 1.0
                body.append([r["line"], "shared", r["op"], f"{r['requests']:,}", f"{per:.2f} wavefronts",
                             "no bank conflict" if ways <= 1.0 else f"{ways:.1f}-way bank conflict"])
        lo, med, hi = self.thread_accesses
        per = f"min {lo}, median {med:g}, max {hi}" if self.per_thread.size else "not counted (over 16 M threads)"
        body.append(["all", "", "accesses per thread", "", per, ""])
        return head, body

    def _title(self) -> str:
        g, b = self.grid, self.block
        return (f"{self.kernel}, grid ({g[0]},{g[1]},{g[2]}) x block ({b[0]},{b[1]},{b[2]}): memory requests "
                f"per warp, counted on the CPU emulator{self.note}")

    def _repr_markdown_(self) -> str:
        return _markdown(self._title(), *self._table())

    def _repr_html_(self) -> str:
        return _html(self._title(), *self._table())

    def __str__(self) -> str:
        return _text(self._title(), *self._table())


def _markdown(caption: str, head: list[str], body: list[list[str]]) -> str:
    out = [f"*{caption}*", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in body])


def _html(caption: str, head: list[str], body: list[list[str]]) -> str:
    import html

    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
    return f"<table><caption>{html.escape(caption)}</caption><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _text(caption: str, head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    return "\n".join([caption, fmt.format(*head), *(fmt.format(*r) for r in body)])


_LAST: list[Counters] = []


def _host(a: Any) -> Any:
    if isinstance(a, np.ndarray) or not hasattr(a, "dtype") or not hasattr(a, "shape"):
        return a
    return _backend.to_numpy(a)


def counters(kernel: Kernel, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
             shared_mem: int = 0) -> Counters:
    """Run `kernel` once on the CPU emulator with memory counters; return the table (see the module doc).

    NumPy arguments are read and written as by a normal launch; GPU arrays are copied to the host first
    and left unchanged. Keep the problem small (the counted launch runs about 100x slower than a normal one).
    """
    from . import emulator

    g, b = _dim3(grid, "grid"), _dim3(block, "block")
    note = ""
    if kernel.backend == "emulator":
        mod = kernel._impl
    else:
        path = ROOT / kernel.shown
        if path.is_file():
            source, shown = resolve(str(path))
        elif kernel._source:  # loaded from source text: count that text
            source, shown = kernel._source, kernel.shown
        else:
            raise ValueError(f"cudl.counters needs the kernel's source; {kernel.shown} is not a file: "
                             "load it from kernels_src/ or from source text")
        names = (kernel.name,) if "<" in kernel.name else ()
        mod = emulator.compile_module(source, shown, kernel._options, names)  # its -D options too
        note = " (the backend is a GPU; these counts come from the emulator and need no GPU)"
    host = [_host(a) for a in args]
    conv = []
    for p, a in zip(kernel.params, host):
        kind = None if p.is_pointer else SCALAR_TYPES.get(p.base)
        conv.append(kind(a) if kind is not None else a)
    if len(conv) != len(kernel.params):
        raise TypeError(f"{kernel.name} takes {len(kernel.params)} arguments, got {len(args)}")
    emulator._LAST_COUNTS.clear()
    old = emulator._FORCED_MODE
    emulator._FORCED_MODE = old | emulator.COUNTERS
    try:
        mod.launch(kernel.name, g, b, conv, kernel.params, shared_mem)
    finally:
        emulator._FORCED_MODE = old
    raw = emulator.last_counts()
    if not raw or raw.get("kernel") != kernel.name:
        raise EmulatorUnsupported("cudl.counters could not count this launch: "
                                  f"{getattr(mod, '_checks_broken', None) or 'no counts came back'}")
    rows = sorted(raw["rows"], key=lambda r: (_line_no(r["line"]), r["space"], r["op"]))
    result = Counters(kernel.name, g, b, rows, raw["per_thread"], note)
    _LAST[:] = [result]
    return result


def _line_no(where: str) -> int:
    tail = where.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 1 << 30


def last() -> Counters | None:
    """The table of the last cudl.counters call (None before the first)."""
    return _LAST[0] if _LAST else None


@dataclass
class Comparison:
    """Several launches side by side, one row each (cudl.counters.compare)."""

    counts: dict[str, Counters]

    def _table(self) -> tuple[list[str], list[list[str]]]:
        cols = [("global load sectors / request", lambda c: c.global_sectors_per_request("load")),
                ("global store sectors / request", lambda c: c.global_sectors_per_request("store")),
                ("shared load n-way", lambda c: c.shared_ways("load")),
                ("shared store n-way", lambda c: c.shared_ways("store"))]
        vals = {h: [f(c) for c in self.counts.values()] for h, f in cols}
        keep = [h for h, _ in cols if not all(np.isnan(v) for v in vals[h])]
        body = [[label] + [f"{vals[h][i]:.1f}" if not np.isnan(vals[h][i]) else "" for h in keep]
                for i, label in enumerate(self.counts)]
        return ["launch", *keep], body

    def _caption(self) -> str:
        first = next(iter(self.counts.values()), None)
        return f"{first.kernel if first else ''}: counted on the CPU emulator{first.note if first else ''}"

    def _repr_markdown_(self) -> str:
        return _markdown(self._caption(), *self._table())

    def _repr_html_(self) -> str:
        return _html(self._caption(), *self._table())

    def __str__(self) -> str:
        return _text(self._caption(), *self._table())


def compare(counts: dict[str, Counters]) -> Comparison:
    """A table of several cudl.counters results, one row per label (e.g. one per stride)."""
    return Comparison(dict(counts))


counters.last = last  # cudl.counters.last(), for graders
counters.compare = compare  # cudl.counters.compare({...}), for chapters
