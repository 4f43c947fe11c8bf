"""cudl.ncu on a real GPU: a table with positive bandwidth, or None with one sentence where counters are refused."""

from __future__ import annotations

import cudl


def test_ncu_vector_add(capsys):
    r = cudl.ncu("""
n = 2**22
x, y, out = cudl.randn(n), cudl.randn(n), cudl.poisoned(n)
k = cudl.load("01-first-kernel/vector_add.cu", "vector_add")
k(((n + 255) // 256,), (256,), (x, y, out, n))
""", kernel="vector_add", metrics=["sectors_per_request"])
    if r is None:  # no ncu, or ERR_NVGPUCTRPERM: one sentence, no exception
        out = capsys.readouterr().out.strip()
        assert out.startswith("cudl.ncu:") and out.count("\n") == 0
        return
    assert r.kernel.startswith("vector_add")
    assert r.dram_gbps > 0 and 0 < r.dram_pct <= 100 and 0 < r.occupancy_pct <= 100
    assert r.get("sectors_per_request") == 4  # 32 threads x 4 bytes = 128 bytes = 4 sectors
    assert r.stalls() and "GB/s" in r._repr_markdown_()
