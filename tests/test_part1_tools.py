"""cudl.sass (listing parsing, the emulator's sentence), cudl.plots' axis and legend helpers, and the
record fields the Scoreboard reads (flops, bytes, demo)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import cudl  # noqa: E402
import cudl.plots  # noqa: E402
from cudl.bench import Timing  # noqa: E402
from cudl.sass import access_widths, opcodes, sass  # noqa: E402

LISTING = """
        Function : matmul_6_vectorized
        /*0150*/                   LDS.128 R16, [R3+0x800] ;                  /* 0x000800000310b984 */
        /*0160*/              @!P0 LDG.E.128 R8, desc[UR4][R2.64] ;           /* 0x0000000402088981 */
        /*0170*/                   FFMA R1, R2, R3, R4 ;                      /* 0x0000000402088981 */
        /*0180*/                   LDS R5, [R2] ;                             /* 0x0000000402088981 */
        /*0190*/               @P1 STS [R2+0x4], R5 ;                        /* 0x0000000402088981 */
        /*01a0*/                   LDG.E.CONSTANT R6, desc[UR4][R8.64] ;      /* 0x0000000402088981 */
"""


def test_opcodes_drop_predicates_and_encodings() -> None:
    assert opcodes(LISTING) == ["LDS.128", "LDG.E.128", "FFMA", "LDS", "STS", "LDG.E.CONSTANT"]


def test_access_widths() -> None:
    w = access_widths(LISTING)
    assert w["LDS"] == {128: 1, 32: 1} and w["LDG"] == {128: 1, 32: 1} and w["STS"] == {32: 1}
    assert w["STG"] == {}


def test_sass_says_why_on_the_emulator(monkeypatch, capsys) -> None:
    monkeypatch.setattr("cudl.sass.on_gpu", lambda: False)
    assert sass("01-first-kernel/vector_add.cu", "vector_add") is None
    assert "emulator" in capsys.readouterr().out


def test_log2_axis_labels_powers_of_two() -> None:
    fig, ax = plt.subplots()
    ax.plot([2**8, 2**12, 2**20, 2**28], [1, 2, 3, 4])
    ax.set_xscale("log", base=2)
    cudl.plots.log2_axis(ax.xaxis)
    fmt = ax.xaxis.get_major_formatter()
    assert fmt(2**10, 0) == "$2^{10}$" and fmt(2**20, 0) == "$2^{20}$"  # one style per axis
    ax.set_xlim(2**6, 2**13)
    assert fmt(2**10, 0) == "1,024"
    assert len(ax.xaxis.get_minor_locator().tick_values(1, 2**28)) == 0  # no minor labels to collide
    plt.close(fig)


def test_bars_leave_room_for_labels(monkeypatch) -> None:
    monkeypatch.setattr(cudl.plots, "ceilings", lambda: {"copy_gbps": 1000.0})
    monkeypatch.setattr(cudl.plots, "gpu_name", lambda: "test GPU")
    t = Timing("k", 1.0, 0.9, 1.1, 10, bytes=1e9)  # 1000 GB/s: at the ceiling
    ax = cudl.plots.bars([t])
    assert ax.get_xlim()[1] >= 1.2 * 1000, "no room right of the longest bar for its label"
    assert ax.get_ylim()[1] < -1, "no band above the bars for the ceiling's name"
    assert any("copy bandwidth" in t.get_text() for t in ax.texts), "the ceiling line is not named"
    plt.close(ax.figure)


def test_the_line_is_the_ceiling_of_the_timings_traffic(monkeypatch) -> None:
    """Bars of reductions draw the read-only stream, vector add its read/write mix; mixed traffic: the copy."""
    import importlib

    fake = {"gpu": "G", "copy_gbps": 3000.0, "read_gbps": 3300.0, "names": {}}
    monkeypatch.setattr(importlib.import_module("cudl.ceilings"), "ceilings", lambda refresh=False: fake)
    monkeypatch.setattr(cudl.plots, "ceilings", lambda: fake)
    monkeypatch.setattr(cudl.plots, "gpu_name", lambda: "test GPU")
    read = [Timing("sum", 1.0, 0.9, 1.1, 10, bytes=3e9, traffic="read"),
            Timing("torch.sum", 1.1, 1.0, 1.2, 10, bytes=3e9, traffic="read")]
    mix = Timing("vector_add", 1.0, 0.9, 1.1, 10, bytes=3e9, traffic=(2e9, 1e9))
    copy = Timing("gelu", 1.0, 0.9, 1.1, 10, bytes=3e9)
    assert cudl.plots.bandwidth_line(read) == (3300.0, "measured read-only stream")
    value, label = cudl.plots.bandwidth_line([mix])
    assert 3000 < value < 3300 and label == "measured ceiling of this read/write mix"
    sweep = [Timing("vector_add", 1.0, 0.9, 1.1, 10, bytes=3 * m, traffic=(2 * m, m)) for m in (1e6, 1e9)]
    assert cudl.plots.bandwidth_line(sweep) == (value, label)  # one ratio, many sizes: one line
    assert cudl.plots.bandwidth_line([copy]) == (3000.0, "measured copy bandwidth")
    assert cudl.plots.bandwidth_line([*read, copy]) == (3000.0, "measured copy bandwidth")  # no shared traffic
    ax = cudl.plots.bars(read[:1], baseline=read[1])
    assert ax.get_xlim()[1] >= 1.2 * 3300 and any("read-only stream" in t.get_text() for t in ax.texts)
    plt.close(ax.figure)
    ax = cudl.plots.rate_vs_size([2**20, 2**21], {"sum": read, "torch": read})
    assert [line.get_ydata()[0] for line in ax.lines if line.get_label() == "measured read-only stream"] == [3300]
    plt.close(ax.figure)


def test_figures_render_at_hidpi() -> None:
    assert plt.rcParams["savefig.dpi"] >= 2 * plt.rcParams["figure.dpi"] >= 150


def test_record_stores_flops_bytes_and_demo(tmp_path, monkeypatch) -> None:
    import importlib

    record = importlib.import_module("cudl.record")
    env = importlib.import_module("cudl.env")
    monkeypatch.setattr(record, "on_gpu", lambda: True)
    monkeypatch.setattr(Timing, "pct_of_ceiling", lambda self: (50.0, "measured copy bandwidth"))
    monkeypatch.setattr(env, "device_info", lambda: {"gpu": "G", "cc": "9.0"})
    t = Timing("sum_atomic", 2.0, 1.9, 2.1, 5, bytes=4e6, flops=1e6)
    out = tmp_path / "g.json"
    record.record(t, chapter="04-reductions", shape=10, dtype="float32", path=out, demo=True)
    (entry,) = json.loads(out.read_text())
    assert entry["demo"] is True and entry["flops"] == 1e6 and entry["bytes"] == 4e6

