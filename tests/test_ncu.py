"""cudl.ncu without a GPU: parsing a stored `ncu --csv --page raw` output, and the clear skip paths."""

from __future__ import annotations

from pathlib import Path

import pytest

import cudl
from cudl.ncu import ALIASES, DEFAULT_METRICS, NcuReport, _why_not, parse_csv

SAMPLE = (Path(__file__).parent / "data" / "ncu_raw_sample.csv").read_text()


KEEP = [m for m, _ in DEFAULT_METRICS] + [ALIASES["sectors_per_request"][0]]


def test_parse_stored_sample():
    """tests/data/ncu_raw_sample.csv: ncu 2025 on an H100, vector_add of 2**24 floats (cudl.ncu's command)."""
    (r,) = parse_csv(SAMPLE, keep=KEEP)
    assert isinstance(r, NcuReport) and r.kernel == "vector_add"
    assert r.dram_gbps == pytest.approx(2618.18, rel=1e-4)  # thousands separators removed, byte/s
    assert r.dram_pct == pytest.approx(78.11)
    assert r.occupancy_pct == pytest.approx(75.81)
    assert r.duration_us == pytest.approx(72.992)
    assert r.get("sectors_per_request") == pytest.approx(4.0)
    assert r.stalls() == [("long_scoreboard", 55.74), ("wait", 3.81), ("short_scoreboard", 3.35)]
    assert set(r.values) - set(KEEP) == {m for m in r.values if m.startswith("smsp__average_warps_issue")}
    assert len(parse_csv(SAMPLE)[0].values) > 100  # without keep: every metric of the raw page
    assert "not_selected" not in dict(r.stalls(top=10))  # selection is not a stall
    d = r.as_dict()
    assert d["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(78.11)
    d.clear()
    assert r.as_dict()  # a copy


def test_tables_render():
    (r,) = parse_csv(SAMPLE, keep=KEEP)
    md, page = r._repr_markdown_(), r._repr_html_()
    assert "| achieved DRAM bandwidth | 2,618 GB/s |" in md
    assert "long_scoreboard 56" in md and "<table>" in page and "vector_add" in str(r)


def test_units_are_scaled_to_base():
    text = ('"ID","Process ID","Kernel Name","dram__bytes.sum.per_second","gpu__time_duration.sum"\n'
            '"","","","Gbyte/second","usecond"\n'
            '"0","1","k","1,500.5","12.5"\n')
    (r,) = parse_csv(text)
    assert r.dram_gbps == pytest.approx(1500.5) and r.values["gpu__time_duration.sum"] == pytest.approx(12500)


def test_no_table_no_report():
    assert parse_csv("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - no permission\n") == []


def test_why_not_names_the_cause():
    assert "ERR_NVGPUCTRPERM" in _why_not("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1)
    assert "profiled no kernel" in _why_not("==WARNING== No kernels were profiled.", 0)
    assert "exit code 3" in _why_not("==ERROR== something broke\n", 3)


def test_skip_on_emulator_prints_one_sentence(capsys):
    assert cudl.backend_name() == "emulator"
    assert cudl.ncu("x = 1", kernel="vector_add") is None
    out = capsys.readouterr().out.strip()
    assert out.startswith("cudl.ncu: skipped on the CPU emulator") and out.count("\n") == 0


def test_missing_ncu_prints_and_returns_none(monkeypatch, capsys):
    import sys

    mod = sys.modules["cudl.ncu"]
    monkeypatch.setattr(mod, "on_gpu", lambda: True)
    monkeypatch.setattr(mod, "_ncu_binary", lambda: None)
    assert cudl.ncu("x = 1", kernel="k", metrics=["bank_conflicts_ld"]) is None
    assert "not installed" in capsys.readouterr().out


def test_aliases_are_ncu_names():
    for full, label in ALIASES.values():
        assert "__" in full and label
