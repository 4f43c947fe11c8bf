"""One-time migration (issue 23) of the records that cudl.record wrote before it stored precisions and ceilings.

Metadata only: no measured number (ms, gbps, tflops, flops, bytes, baseline_ms, ratio) changes. What changes:
* `compute` was "fp32" by default whatever the dtype: it becomes the precision of the dtype (None for "w4", "w8").
* compute-bound records (with flops) get the ceiling of their precision, where this GPU's records tell its value
  (a record labelled "cuBLAS fp16" at p% gives cuBLAS fp16 = tflops / p); elsewhere no percentage, with a note.
  With bytes too, the larger of the two percentages (the roofline).
* memory-bound records keep their percentage of the copy; `ceiling_value` is the copy rate it implies, and a
  record above 100% carries the reason in `note`.
* `baseline_kind`: "library" or "previous" (the book's own earlier step), from the baseline's name.

Run once from the repository root: `PYTHONPATH=. python benchmarks/migrate_issue23.py` (it prints what it changes
and refuses to run on records that are already migrated).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from cudl.ceilings import precision_of
from cudl.record import baseline_kind_of

HERE = Path(__file__).resolve().parent
COPY = "1:1 copy (cupy.copyto, 1 GiB)"

# Why a legacy record passes 100% of the copy, by (chapter, kernel, dtype).
READ_ONLY = ("read-only: reads every input byte once and writes a few bytes per block or row; a read stream can "
             "pass a 1:1 copy, and the read-only ceiling was not measured in this run")
SAME_TRAFFIC = ("the same 1:1 traffic as the copy, and faster: the ceiling is one measurement of cupy.copyto (a CuPy "
                "elementwise kernel), not the fastest copy this GPU can do; the 16-byte copy kernel that "
                "cudl.ceilings now also measures did not exist in this run")
ABOVE_COPY = {
    ("01-first-kernel", "vector_add_float4", "float32"):
        "reads 2 bytes per byte written (x and y, then out): a read-heavy stream can pass a 1:1 copy, and the "
        "read-only ceiling was not measured in this run",
    ("04-reductions", "sum_grid_stride_float4", "float32"): READ_ONLY,
    ("04-reductions", "sum_onepass", "float32"): READ_ONLY,
    ("04-reductions", "max_onepass", "float32"): READ_ONLY,
    ("04-reductions", "row_sum_block", "float32"): READ_ONLY,
    ("03-elementwise", "gelu_forward_vec", "float32"): SAME_TRAFFIC,
    ("07-fusion", "triton softmax", "float32"): SAME_TRAFFIC,
    ("07-fusion", "triton layernorm", "float32"): SAME_TRAFFIC,
}
FIELDS = ("chapter", "kernel", "shape", "dtype", "ms", "gbps", "tflops", "compute", "traffic", "pct_of_ceiling",
          "ceiling", "ceiling_key", "ceiling_value", "ceiling_unit", "note", "baseline", "baseline_ms",
          "baseline_kind", "ratio", "flops", "bytes", "demo", "gpu", "cc", "versions", "commit", "date")


def gemm_ceilings(records: list[dict]) -> dict[str, dict[str, float]]:
    """{precision: {commit: TFLOP/s}} of the GEMM ceilings the legacy percentages were taken of."""
    found: dict[str, dict[str, list[float]]] = {}
    for r in records:
        label = str(r.get("ceiling") or "")
        if label.startswith("cuBLAS ") and r.get("pct_of_ceiling") and r.get("tflops"):
            precision = label.split()[1]
            found.setdefault(precision, {}).setdefault(r["commit"], []).append(100 * r["tflops"] / r["pct_of_ceiling"])
    return {p: {c: statistics.median(v) for c, v in by_commit.items()} for p, by_commit in found.items()}


def migrate(r: dict, gemm: dict[str, dict[str, float]]) -> dict:
    if "ceiling_value" in r:
        raise SystemExit(f"already migrated: {r['chapter']} {r['kernel']}")
    out = {k: r.get(k) for k in FIELDS}
    out["compute"] = precision_of(r["dtype"])
    out["traffic"] = "copy" if r.get("bytes") else None
    out["baseline_kind"] = baseline_kind_of(r["baseline"]) if r.get("baseline") else None
    for k in ("pct_of_ceiling", "ceiling", "ceiling_key", "ceiling_value", "ceiling_unit", "note"):
        out[k] = None
    found = []  # (pct, name, key, value, unit)
    if r.get("gbps") and r.get("pct_of_ceiling") and str(r.get("ceiling")).startswith("measured copy"):
        found.append((r["pct_of_ceiling"], COPY, "copy", 100 * r["gbps"] / r["pct_of_ceiling"], "GB/s"))
    if r.get("flops"):
        rates = gemm.get(out["compute"], {})
        # the ceiling of the record's own run (commit), else the median of this GPU's other runs
        value = rates.get(r["commit"]) or (statistics.median(rates.values()) if rates else None)
        if value:
            found.append((100 * r["tflops"] / value, f"cuBLAS {out['compute']} GEMM (torch.mm, 8192³)",
                          out["compute"], value, "TFLOP/s"))
        else:  # compute-bound without its ceiling: no percentage (a copy's would not be the bound)
            found = []
            out["note"] = f"no measured {out['compute']} ceiling on this GPU"
    if found:
        pct, name, key, value, unit = max(found)
        out.update(pct_of_ceiling=pct, ceiling=name, ceiling_key=key, ceiling_value=value, ceiling_unit=unit)
        if pct > 100:
            why = ABOVE_COPY.get((r["chapter"], r["kernel"], r["dtype"]))
            if why is None:
                raise SystemExit(f"{r['chapter']} {r['kernel']}: {pct:.1f}% and no reason written for it")
            out["note"] = why
    return out


def show(r: dict) -> str:
    pct = f"{r['pct_of_ceiling']:.1f}% of {r['ceiling']}" if r.get("pct_of_ceiling") is not None else "no %"
    return f"compute={r.get('compute')}, {pct}" + (f", note: {r['note']}" if r.get("note") else "")


def main(paths: list[Path]) -> None:
    for path in paths:
        records = json.loads(path.read_text())
        gemm = gemm_ceilings(records)
        print(f"{path.name}: GEMM ceilings recovered from its records (TFLOP/s by commit): {gemm}")
        new = [migrate(r, gemm) for r in records]
        for old, r in zip(records, new):
            for k in ("ms", "gbps", "tflops", "flops", "bytes", "baseline_ms", "ratio"):
                assert old.get(k) == r.get(k), (k, old, r)  # nothing measured changes
            print(f"{r['chapter']} | {r['kernel']} | {r['shape']} {r['dtype']}\n  before: {show(old)}\n"
                  f"  after:  {show(r)}" + (f", baseline_kind={r['baseline_kind']}" if r.get("baseline") else ""))
        path.write_text(json.dumps(new, indent=1) + "\n")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or sorted(HERE.glob("*.json")))
