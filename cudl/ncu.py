"""`cudl.ncu`: run Nsight Compute on one kernel launch from a notebook and show a few metrics as a table.

    r = cudl.ncu('''
    n = 2**24
    x, y, out = cudl.randn(n), cudl.randn(n), cudl.poisoned(n)
    k = cudl.load("01-first-kernel/vector_add.cu", "vector_add")
    k(((n + 255) // 256,), (256,), (x, y, out, n))
    ''', kernel="vector_add", metrics=["sectors_per_request"])
    r                     # a table in the notebook; r.as_dict() gives {metric: value}

Where Nsight Compute cannot run (the CPU emulator, no `ncu` on PATH, performance counters not allowed
for this user as on Colab) it prints one sentence saying so and returns None; it never raises.
"""

from __future__ import annotations

import csv
import html
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .backend import on_gpu

# Always collected: (metric, label). Each is documented in Nsight Compute's Profiling Guide.
DEFAULT_METRICS: tuple[tuple[str, str], ...] = (
    ("gpu__time_duration.sum", "duration"),
    ("dram__bytes.sum.per_second", "achieved DRAM bandwidth"),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput, % of peak"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM throughput, % of peak"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy, %"),
)
# Stall reasons: average warps stalled for that reason per issued instruction (Warp State Statistics).
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
STALL_REGEX = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
# Short names for metrics a chapter asks for often; any full ncu metric name works too.
ALIASES: dict[str, tuple[str, str]] = {
    "bank_conflicts_ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                          "shared-memory bank conflicts (loads)"),
    "bank_conflicts_st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                          "shared-memory bank conflicts (stores)"),
    "sectors_per_request": ("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
                            "32-byte sectors per global load request"),
    "l2_hit_rate": ("lts__t_sector_hit_rate.pct", "L2 hit rate, %"),
    "registers": ("launch__registers_per_thread", "registers per thread"),
    "theoretical_occupancy": ("sm__maximum_warps_per_active_cycle_pct", "theoretical occupancy, %"),
}
TOP_STALLS = 3
# Unit prefixes ncu may print (with --print-units base it prints base units, but be lenient).
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "u": 1e-6, "n": 1e-9}


@dataclass
class NcuReport:
    """The metrics of one profiled kernel launch: shown as a table in notebooks, `.as_dict()` for code."""

    kernel: str
    values: dict[str, float]  # metric name -> value in base units (bytes/s, ns, %)
    units: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    device: str = ""

    def as_dict(self) -> dict[str, float]:
        return dict(self.values)

    def get(self, key: str) -> float | None:
        """A metric by full name or alias (None when it was not collected)."""
        return self.values.get(ALIASES.get(key, (key,))[0])

    @property
    def dram_gbps(self) -> float | None:
        v = self.values.get("dram__bytes.sum.per_second")
        return None if v is None else v / 1e9

    @property
    def dram_pct(self) -> float | None:
        return self.values.get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")

    @property
    def occupancy_pct(self) -> float | None:
        return self.values.get("sm__warps_active.avg.pct_of_peak_sustained_active")

    @property
    def duration_us(self) -> float | None:
        v = self.values.get("gpu__time_duration.sum")
        return None if v is None else v / 1e3

    def stalls(self, top: int = TOP_STALLS) -> list[tuple[str, float]]:
        """The `top` stall reasons, largest first: (reason, warps stalled per issued instruction)."""
        found = [(m[len(STALL_PREFIX):-len(STALL_SUFFIX)], v) for m, v in self.values.items()
                 if m.startswith(STALL_PREFIX) and m.endswith(STALL_SUFFIX)]
        found = [(r, v) for r, v in found if r not in ("selected", "not_selected")]  # not stalls
        return sorted(found, key=lambda rv: -rv[1])[:top]

    def rows(self) -> list[tuple[str, str, str]]:
        """(label, formatted value, metric name) for the table."""
        out = []
        for m, v in self.values.items():
            if m.startswith(STALL_PREFIX):
                continue
            label = self.labels.get(m, m)
            if m == "dram__bytes.sum.per_second":
                text = f"{v / 1e9:,.0f} GB/s"
            elif m == "gpu__time_duration.sum":
                text = f"{v / 1e3:,.1f} µs"
            elif self.units.get(m) == "%" or m.endswith("pct"):
                text = f"{v:.1f} %"
            else:
                text = f"{v:,.4g}"
            out.append((label, text, m))
        stalls = self.stalls()
        if stalls:
            text = ", ".join(f"{r} {v:.2g}" for r, v in stalls)
            out.append(("top warp stalls (warps per issue)", text, STALL_PREFIX + "*" + STALL_SUFFIX))
        return out

    def _repr_markdown_(self) -> str:
        head = f"**Nsight Compute: `{self.kernel}`**" + (f" on {self.device}" if self.device else "")
        lines = [head, "", "| metric | value | ncu name |", "| --- | ---: | --- |"]
        lines += [f"| {label} | {text} | `{m}` |" for label, text, m in self.rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        cap = f"Nsight Compute: <code>{esc(self.kernel)}</code>" + (f" on {esc(self.device)}" if self.device else "")
        body = "".join(f"<tr><td>{esc(label)}</td><td style='text-align:right'>{esc(text)}</td>"
                       f"<td><code>{esc(m)}</code></td></tr>" for label, text, m in self.rows())
        return (f"<table><caption>{cap}</caption><thead><tr><th>metric</th><th>value</th><th>ncu name</th>"
                f"</tr></thead><tbody>{body}</tbody></table>")

    def __str__(self) -> str:
        w = max((len(r[0]) for r in self.rows()), default=0)
        return "\n".join([f"Nsight Compute: {self.kernel}"] + [f"  {a:<{w}}  {b}" for a, b, _ in self.rows()])

    __repr__ = __str__


def _number(text: str, unit: str) -> tuple[float, str] | None:
    """ncu's printed value (maybe '1,234.5') and unit ('Gbyte/second') -> (value in base units, base unit)."""
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    m = re.match(r"^([KMGTmun]?)(byte|second|sec|cycle|hz|Hz)(.*)$", unit)
    if m and not (m.group(1) == "m" and m.group(2) == "hz"):
        return v * _SCALE[m.group(1)], m.group(2) + m.group(3)
    m = re.match(r"^([mun])second$", unit)
    if m:
        return v * _SCALE[m.group(1)] * 1e9, "nsecond"
    return v, unit


def _to_ns(value: float, unit: str) -> float:
    """Durations are reported in ns whatever unit ncu printed."""
    scale = {"second": 1e9, "sec": 1e9, "s": 1e9, "msecond": 1e6, "ms": 1e6, "usecond": 1e3, "us": 1e3}
    return scale.get(unit, 1.0) * value


def parse_csv(text: str, labels: dict[str, str] | None = None,
              keep: Collection[str] | None = None) -> list[NcuReport]:
    """Parse `ncu --csv --page raw` output (other lines around it are ignored): one report per launch.

    The raw page lists every metric ncu collected (device attributes, launch settings, .min/.max siblings);
    with `keep`, only those metric names and the stall reasons are kept.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID","Process ID"')), None)
    if start is None:
        return []
    table = [ln for ln in lines[start:] if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(table))))
    header, units, data = rows[0], None, rows[1:]
    if data and data[0] and data[0][0] == "":
        units, data = data[0], data[1:]
    labels = {**{m: label for m, label in DEFAULT_METRICS}, **{m: label for m, label in ALIASES.values()},
              **(labels or {})}
    reports = []
    for row in data:
        rec = dict(zip(header, row))
        values, unit_of = {}, {}
        for i, name in enumerate(header):
            if "__" not in name or i >= len(row):
                continue
            if keep is not None and name not in keep and not (
                    name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)):
                continue
            parsed = _number(row[i], units[i] if units and i < len(units) else "")
            if parsed is None:
                continue
            v, u = parsed
            if name == "gpu__time_duration.sum":
                v, u = _to_ns(v, u), "nsecond"
            values[name], unit_of[name] = v, u
        reports.append(NcuReport(kernel=rec.get("Kernel Name", "?"), values=values, units=unit_of,
                                 labels=labels, device=rec.get("Device Name", "")))
    return reports


def _ncu_binary() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/opt/nvidia/nsight-compute"):
        p = Path(d, "bin", "ncu") if d else None
        if p and p.is_file():
            return str(p)
    return None


def _why_not(output: str, rc: int) -> str:
    """One sentence on why ncu produced no metrics."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("cudl.ncu: this machine does not let your user read the GPU's performance counters "
                "(ERR_NVGPUCTRPERM, as on Colab), so Nsight Compute cannot measure here; the stored outputs "
                "show what it reports on the GPU named at the top of the page.")
    if "No kernels were profiled" in output:
        return ("cudl.ncu: Nsight Compute profiled no kernel: check that `kernel` names a kernel the snippet "
                "launches, and that launch_skip is smaller than the number of its launches.")
    errors = [ln.strip() for ln in output.splitlines() if "error" in ln.lower()]
    last = (errors or [ln for ln in output.splitlines() if ln.strip()] or ["no output"])[-1]
    return f"cudl.ncu: Nsight Compute returned no metrics (exit code {rc}): {last[:300]}"


def _resolve_metrics(metrics: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    names, labels = [m for m, _ in DEFAULT_METRICS], {}
    for m in metrics:
        full, label = ALIASES.get(m, (m, m))
        if full not in names:
            names.append(full)
        labels[full] = label
    return names, labels


def ncu(code: str, kernel: str, metrics: Sequence[str] = (), launch_skip: int = 0, *,
        timeout_s: float = 300) -> NcuReport | None:
    """Profile one launch of `kernel` (a regex on its name) made by the Python snippet `code`.

    The snippet runs in a fresh Python process under `ncu`, with `cudl`, `np` and `xp` already imported; it
    should set up inputs and launch the kernel. `launch_skip` skips that many matching launches first (e.g.
    warm-up runs). `metrics` adds ncu metric names or aliases from `cudl.ncu.ALIASES`. Returns None, after
    printing one sentence why, where Nsight Compute cannot run.
    """
    if not on_gpu():
        print("cudl.ncu: skipped on the CPU emulator: Nsight Compute reads the hardware counters of a real "
              "GPU; the stored outputs show what it reports on the GPU named at the top of the page.")
        return None
    binary = _ncu_binary()
    if binary is None:
        print("cudl.ncu: Nsight Compute (`ncu`) is not installed or not on PATH here; install the CUDA "
              "toolkit's nsight-compute to run it, or read the stored outputs (from the GPU named at the top of "
              "the page).")
        return None
    names, labels = _resolve_metrics(metrics)
    root = str(Path(__file__).resolve().parent.parent)
    prelude = "import numpy as np\nimport cudl\nxp = cudl.xp\n"
    body = prelude + textwrap.dedent(code) + "\ncudl.sync()\n"
    with tempfile.TemporaryDirectory(prefix="cudl-ncu-") as tmp:
        script = Path(tmp, "snippet.py")
        script.write_text(body)
        cmd = [binary, "--csv", "--page", "raw", "--print-units", "base", "--target-processes", "all",
               "--kernel-name", f"regex:{kernel}", "--launch-skip", str(int(launch_skip)),
               "--launch-count", "1", "--metrics", ",".join([*names, STALL_REGEX]),
               sys.executable, str(script)]
        env = {**os.environ, "CUDL_BACKEND": "gpu",
               "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            print(f"cudl.ncu: Nsight Compute did not finish within {timeout_s:.0f} s; profile a smaller launch.")
            return None
        except OSError as exc:
            print(f"cudl.ncu: could not start Nsight Compute ({exc}).")
            return None
    output = proc.stdout + "\n" + proc.stderr
    reports = parse_csv(proc.stdout, labels, keep=names)
    if not reports or not reports[0].values:
        print(_why_not(output, proc.returncode))
        return None
    rep = reports[0]
    if not rep.device:
        from .env import gpu_name

        rep.device = gpu_name()
    return rep
