"""Chapter 11's figure "mma.sync m16n8k16: the lane that holds each element", stacked for a phone.

The chapter draws the A, B and C fragments side by side (a code cell, whose stored output comes from a
GPU run): at 390 px that figure's lane numbers are 3 px tall. This draws the same ownership, computed by
the chapter's own `mma_16816_owner`, with A above B and C, as an SVG that the page shows instead on a
narrow screen (book/_static/cudl.css). If that function changes, run this again (tests/test_book.py
checks that the file is up to date):

    python book/figures/mma_16816_owners.py
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "11-tensor-cores.md"
SVG = Path(__file__).with_name("mma-16816-owners-stacked.svg")
# matplotlib's Pastel1, the chapter's colours: register 0 red, 1 blue, 2 green, 3 purple
COLOURS = ("#fbb4ae", "#b3cde3", "#ccebc5", "#decbe4")
CELL, MARGIN, GAP = 23, 8, 16  # a row of 16 cells: A's, or B's 8, a gap and C's 8
FONT = 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif"'


def chapter_owner() -> Any:
    """The chapter's `mma_16816_owner(which) -> (lane, register)`, executed from its code cell."""
    text = CHAPTER.read_text()
    m = re.search(r"^def mma_16816_owner\(.*?(?=\n\n\n)", text, re.S | re.M)
    if not m:
        raise LookupError(f"no `def mma_16816_owner` followed by two blank lines in {CHAPTER}")
    scope: dict[str, Any] = {"np": np}
    exec(m.group(0), scope)
    return scope["mma_16816_owner"]


def _grid(which: str, lane: np.ndarray, reg: np.ndarray, x: int, y: int) -> list[str]:
    rows, cols = lane.shape
    name = which.lower()
    out = [f'<text x="{x + cols * CELL / 2:g}" y="{y - 7}" font-size="12" text-anchor="middle">'
           f'{which}: {rows} × {cols}, registers {name}0..{name}{reg.max()}</text>']
    out += [f'<rect x="{x + j * CELL}" y="{y + i * CELL}" width="{CELL}" height="{CELL}" '
            f'fill="{COLOURS[r]}"/>' for (i, j), r in np.ndenumerate(reg)]
    out.append('<g font-size="11" text-anchor="middle">')
    out += [f'<text x="{x + (j + 0.5) * CELL:g}" y="{y + (i + 0.5) * CELL + 4:g}">{ln}</text>'
            for (i, j), ln in np.ndenumerate(lane)]
    out.append("</g>")
    out.append(f'<rect x="{x}" y="{y}" width="{cols * CELL}" height="{rows * CELL}" fill="none" '
               f'stroke="#000" stroke-width="1"/>')
    return out


def svg_text() -> str:
    owner = chapter_owner()
    width = 2 * MARGIN + 16 * CELL + GAP
    top_a = 74
    top_bc = top_a + 16 * CELL + 40
    height = top_bc + 16 * CELL + MARGIN
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" {FONT} role="img">',
             "<title>mma.sync m16n8k16: the lane that holds each element of A, B and C</title>",
             f'<rect width="{width}" height="{height}" fill="#fff"/>',
             f'<text x="{width / 2:g}" y="20" font-size="15" text-anchor="middle">mma.sync m16n8k16:</text>',
             f'<text x="{width / 2:g}" y="38" font-size="13" text-anchor="middle">'
             "the lane that holds each element; colour = register</text>"]
    parts += _grid("A", *owner("A"), MARGIN + GAP // 2, top_a)
    parts += _grid("B", *owner("B"), MARGIN, top_bc)
    parts += _grid("C", *owner("C"), width - MARGIN - 8 * CELL, top_bc)
    return "\n".join(parts + ["</svg>", ""])


if __name__ == "__main__":
    SVG.write_text(svg_text())
    print(f"wrote {SVG.relative_to(ROOT)}")
