"""cudl.ncu without a GPU: parsing a stored `ncu --csv --page raw` output, and the clear skip paths."""

from __future__ import annotations

from pathlib import Path

import pytest

import cudl
from cudl.ncu import ALIASES, NcuReport, _why_not, parse_csv

SAMPLE = (Path(__file__).parent / "data" / "ncu_raw_sample.csv").read_text()


def test_parse_stored_sample():
    (r,) = parse_csv(SAMPLE)
    assert isinstance(r, NcuReport) and r.kernel == "vector_add"
    assert r.dram_gbps == pytest.approx(3051.23, rel=1e-4)  # thousands separators removed
    assert r.dram_pct == pytest.approx(91.42)
    assert r.occupancy_pct == pytest.approx(79.85)
    assert r.duration_us == pytest.approx(66.016)
    assert r.get("sectors_per_request") == pytest.approx(4.0)
    assert r.stalls() == [("long_scoreboard", 20.64), ("lg_throttle", 1.87), ("wait", 0.74)]
    assert "not_selected" not in dict(r.stalls(top=10))  # selection is not a stall
    d = r.as_dict()
    assert d["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(91.42)
    d.clear()
    assert r.as_dict()  # a copy


def test_tables_render():
    (r,) = parse_csv(SAMPLE)
    md, page = r._repr_markdown_(), r._repr_html_()
    assert "| achieved DRAM bandwidth | 3,051 GB/s |" in md
    assert "long_scoreboard 21" in md and "<table>" in page and "vector_add" in str(r)


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
