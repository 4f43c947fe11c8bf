"""Execute chapters/12-flash-attention.ipynb on a GPU into $OUT (or /tmp), leaving the stored notebook as it is,
and print every text output and error: a check that the chapter's GPU-only cells run, before the lead's
re-execution after merging. From the repository root: python3 tests/gpu/ch12_notebook_smoke.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

os.environ.pop("MPLBACKEND", None)
path = Path("chapters/12-flash-attention.ipynb").resolve()
nb = nbformat.read(path, as_version=4)
t0 = time.time()
failed = None
try:
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
except Exception as exc:  # noqa: BLE001 (print what ran, then the error)
    failed = exc
for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
        continue
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        text = out.get("text") or ("" if "text/markdown" in data else data.get("text/plain", ""))
        if out.get("output_type") == "error":
            text = f"{out['ename']}: {out['evalue']}"
        if text:
            print(f"[cell {i}] {str(text).rstrip()[:1500]}")
        if "application/papermill.record/text/plain" in data:
            print(f"[cell {i}] glue {out.get('metadata', {}).get('scrapbook', {}).get('name')}: "
                  f"{out['data']['application/papermill.record/text/plain']}")
nbformat.write(nb, os.path.join(os.environ.get("OUT", "/tmp"), "12-flash-attention.executed.ipynb"))
print(f"== {'FAILED: ' + str(failed)[-1500:] if failed else 'executed'} in {time.time() - t0:.0f} s")
sys.exit(1 if failed else 0)
