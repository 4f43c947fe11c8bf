"""The website: _toc.yml against book/coming/, the Scoreboard page, and every built page in a real browser.

The browser tests need the built book (`_build/html`; `make test` builds it first and sets
CUDL_BOOK_BUILT=1) and Debian's chromium (`make browser` installs it), driven by Playwright's Python
package; they are skipped when either is missing. No browser is ever downloaded.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHROMIUM = Path("/usr/bin/chromium")
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())

# Pages that come from notebooks a reader runs: each must have a Colab link to its own .ipynb.
NOTEBOOK_DIRS = ("chapters", "exercises")
# Hosts a page may load from (stubbed here, so the test needs no network): MathJax and the widget manager
# (jsdelivr), thebe (unpkg), require.js for stored widget outputs such as tqdm bars (cdnjs).
EXTERNAL_OK = {"cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com"}


def toc_files(node: object) -> list[str]:
    """Every `file:` entry of _toc.yml, in order (root included)."""
    if isinstance(node, dict):
        own = [node[k] for k in ("root", "file") if k in node]
        return own + [f for v in node.values() for f in toc_files(v)]
    if isinstance(node, list):
        return [f for v in node for f in toc_files(v)]
    return []


# --- _toc.yml and book/coming/ --------------------------------------------------------------------


def number(entry: str) -> str:
    """'book/coming/05-matmul' -> '05'."""
    return Path(entry).name[:2]


def test_toc_chapters_and_coming_pages_agree() -> None:
    """A written chapter (chapters/NN-slug) has no 'coming' page left, and a 'coming' page no chapter."""
    entries = toc_files(TOC)
    chapters = [e for e in entries if re.fullmatch(r"chapters/\d\d-[\w-]+", e)]
    coming = [e for e in entries if e.startswith("book/coming/")]
    coming_files = sorted(p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "book/coming").glob("*.md"))
    problems = []
    for e in chapters:
        problems += [f"{e} is written: delete {c}.md and its _toc.yml entry" for c in set(coming) | set(coming_files)
                     if number(c) == number(e)]
    for c in coming_files:
        if c not in coming and not any(number(e) == number(c) for e in chapters):
            problems.append(f"{c}.md is in no _toc.yml entry: list it (or delete it if its chapter is written)")
    numbers = [number(e) for e in chapters + coming]
    problems += [f"chapter {n} appears {numbers.count(n)} times in _toc.yml" for n in sorted(set(numbers))
                 if numbers.count(n) > 1]
    assert not problems, "\n".join(problems)


def test_toc_entries_exist() -> None:
    """Every _toc.yml entry is a file; chapters and exercises as .ipynb (the book renders those)."""
    missing = []
    for e in toc_files(TOC):
        suffixes = (".ipynb",) if e.startswith(NOTEBOOK_DIRS) else (".md", ".ipynb")
        if not any((ROOT / f"{e}{s}").is_file() for s in suffixes):
            missing.append(f"{e}{suffixes[0]}")
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


# --- code shown on the site -----------------------------------------------------------------------

# cudl.show prints kernel files as they are: a longer line scrolls sideways on the site (STYLE.md).
CODE_WIDTH = 90
# Other kernels_src/ files a page shows by a literal path: cudl.show("07-fusion/x.py"), show_part(...)
_SHOWN = re.compile(r"""\bshow\(\s*["']([\w./-]+\.\w+)["']""")


def shown_kernel_files() -> list[Path]:
    """Every .cu/.cuh file of kernels_src/, and any other kernels_src/ file a chapter shows by path."""
    kernels = ROOT / "kernels_src"
    files = {p for pattern in ("*.cu", "*.cuh") for p in kernels.rglob(pattern)}
    for page in ROOT.glob("chapters/*.md"):
        files |= {kernels / name for name in _SHOWN.findall(page.read_text()) if (kernels / name).is_file()}
    return sorted(files)


# Wide lines that wait for their notebooks' next GPU run: breaking one changes the file, which makes every
# notebook that uses it stale (cudl.nbtools code_hash). Each entry must go when its line is fixed.
KNOWN_WIDE: dict[str, str] = {}
# The same for a whole file: every wide line of it waits (the entry must go when none is left).
KNOWN_WIDE_FILES: dict[str, str] = {}


def test_shown_code_fits_the_page() -> None:
    """No line of a kernel file is wider than CODE_WIDTH columns."""
    files = shown_kernel_files()
    assert any(p.suffix == ".py" for p in files), "the shown-file pattern no longer finds triton_rows.py"
    found = {f"{p.relative_to(ROOT)}:{i}": len(line) for p in files
             for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > CODE_WIDTH}
    waiting = {where for where in found if where.rsplit(":", 1)[0] in KNOWN_WIDE_FILES}
    wide = [f"{where}: {n} columns" for where, n in found.items() if where not in KNOWN_WIDE and where not in waiting]
    wide += [f"{where} is no longer wide: remove it from KNOWN_WIDE" for where in KNOWN_WIDE if where not in found]
    wide += [f"{file} has no wide line left: remove it from KNOWN_WIDE_FILES" for file in KNOWN_WIDE_FILES
             if not any(where.rsplit(":", 1)[0] == file for where in found)]
    assert not wide, (f"lines wider than {CODE_WIDTH} columns (break the parameter list or the "
                      "expression, move a trailing comment above its line):\n" + "\n".join(wide))


# --- the Scoreboard page --------------------------------------------------------------------------


def _execute_scoreboard(bench_dir: Path, monkeypatch: pytest.MonkeyPatch):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("CUDL_BENCHMARKS_DIR", str(bench_dir))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = jupytext.read(ROOT / "book" / "scoreboard.md")
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "book")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    markdown = "\n".join(o["data"].get("text/markdown", "") + o["data"].get("text/html", "")
                         for o in outputs if "data" in o)
    images = [o for o in outputs if "data" in o and "image/png" in o["data"]]
    return markdown, images


def _fake_gpu(monkeypatch: pytest.MonkeyPatch, gpu: str, ceilings: dict) -> None:
    """cudl.record and its ceilings on a fake GPU named `gpu` with these measured ceilings."""
    import importlib

    monkeypatch.setattr(importlib.import_module("cudl.backend"), "on_gpu", lambda: True)
    monkeypatch.setattr(importlib.import_module("cudl.record"), "on_gpu", lambda: True)
    ceil = importlib.import_module("cudl.ceilings")
    monkeypatch.setattr(ceil, "ceilings", lambda refresh=False: ceilings)
    monkeypatch.setattr(ceil, "_fastest", {})  # a new run
    monkeypatch.setattr(importlib.import_module("cudl.env"), "device_info", lambda: {
        "gpu": gpu, "cc": "9.0", "driver": "12.8", "runtime": "12.8", "cupy": "13.4.0", "torch": None,
        "numpy": "2.2.0"})


def _sample_records(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Benchmarks written by the real cudl.record, with the GPU and its ceilings faked."""
    import importlib

    from cudl.bench import Timing

    record = importlib.import_module("cudl.record")  # cudl.record: a function
    monkeypatch.setenv("CUDL_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")  # whole, as a run stores it
    for gpu, scale in (("NVIDIA H100 80GB HBM3", 1.0), ("Tesla T4", 10.0)):
        n, mnk = 2**26, 2 * 4096**3
        # ceilings such that vector_add reaches 91% of the copy, matmul_1_naive 40% of cuBLAS fp32, hgemm
        # 50% of cuBLAS fp16, and torch._int_mm 80% of the int8 reference (our int8 kernel beats it)
        _fake_gpu(monkeypatch, gpu, {
            "gpu": gpu, "copy_gbps": 12 * n / 0.25e6 / 0.91 / scale, "read_gbps": 4 * n / 0.08e6 / scale,
            "gemm_tflops": {"fp32": mnk / 20e9 / 0.40 / scale, "fp16": mnk / 0.4e9 / 0.5 / scale,
                            "int8": mnk / 0.5e9 / 0.8 / scale},
            "names": {"copy": "1:1 copy", "read": "read-only stream", "fp32": "cuBLAS fp32 GEMM",
                      "fp16": "cuBLAS fp16 GEMM", "int8": "cuBLAS int8 GEMM"}})
        out = path / f"{record.gpu_slug(gpu)}.json"

        def timing(name, ms, **kw):
            return Timing(name, ms * scale, 0.95 * ms * scale, 1.05 * ms * scale, 20, **kw)

        vadd, torch_add = timing("vector_add", 0.25, bytes=12 * n), timing("torch.add", 0.26, bytes=12 * n)
        record.record(vadd, chapter="01-first-kernel", shape=n, dtype="float32", baseline=torch_add, path=out)
        record.record(timing("matmul_1_naive", 20, flops=mnk), chapter="05-matmul", shape=(4096,) * 3,
                      dtype="float32", path=out)
        # above the ridge point: compute-bound although it has bytes (the page must not show 91% of copy)
        fma = timing("fma_intensity, iters=1024", 20, bytes=8 * n, flops=2 * 1024 * n)
        record.record(fma, chapter="02-execution-model", shape=n, dtype="float32", path=out)
        # fp16: against the fp16 GEMM, not fp32 (which gave FlashAttention "1042%")
        record.record(timing("hgemm", 0.4, flops=mnk), chapter="11-tensor-cores", shape=(4096,) * 3,
                      dtype="float16->float32", path=out)
        # int8: the library first, then the book's kernel, 2x faster than it: the kernel is the ceiling
        int_mm = timing("torch._int_mm", 0.5, flops=mnk)
        record.record(int_mm, chapter="13-quantization", shape=(4096,) * 3, dtype="int8", path=out)
        record.record(timing("igemm wgmma", 0.25, flops=mnk), chapter="13-quantization", shape=(4096,) * 3,
                      dtype="int8", baseline=int_mm, path=out)
        record.record(timing("fp8 gemm", 0.2, flops=mnk), chapter="13-quantization", shape=(4096,) * 3,
                      dtype="fp8 e4m3", path=out)
        # a previous step as the baseline, and a read-only kernel above the 1:1 copy that says why
        record.record(timing("split-K", 0.1, bytes=4 * n, traffic="read"), chapter="10-inference", shape=n,
                      dtype="float16", baseline=timing("chunk 4096", 1.0), path=out)
        record.record(timing("row_sum_block", 0.07, bytes=4 * n), chapter="04-reductions", shape=n,
                      dtype="float32", note="read-only: passes a 1:1 copy", path=out)
        # within 0.5% of the library: no direction in "1.00x faster"
        record.record(timing("relu", 0.25, bytes=8 * n), chapter="03-elementwise", shape=n, dtype="float32",
                      baseline=timing("torch.relu", 0.2505, bytes=8 * n), path=out)
        atomic, torch_sum = timing("sum_atomic", 76.3, bytes=4 * n), timing("torch.sum", 0.1, bytes=4 * n)
        record.record(atomic, chapter="04-reductions", shape=n, dtype="float32", baseline=torch_sum,
                      path=out, demo=True)
    multi = path / "14-multi-gpu" / "2x-nvidia-h100-80gb-hbm3"
    multi.mkdir(parents=True)
    (multi / "ring.json").write_text(json.dumps({"world": 2, "gpu": "NVIDIA H100 80GB HBM3", "rows": [
        {"bytes": 256 * 2**20, "ring_busbw": 300.0, "lib_busbw": 360.0}]}))
    (multi / "ddp.json").write_text(json.dumps({"world": 2, "gpu": "NVIDIA H100 80GB HBM3",
                                                "scaling_efficiency": 0.72, "overlap": {"overlap": 0.4}}))


def _rows(html: str) -> dict[str, dict[str, str]]:
    """{kernel: {column: cell text}} of the Scoreboard's tables (the last row of a kernel wins)."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", html):
        cells = dict(re.findall(r'<td class="[^"]*" data-label="([^"]+)"><span>(.*?)</span></td>', row))
        if "Kernel" in cells:
            rows[re.sub(r"<[^>]+>", " ", cells["Kernel"]).split()[0]] = {
                k: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", v)).strip() for k, v in cells.items()}
    return rows


def test_scoreboard_without_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    markdown, images = _execute_scoreboard(tmp_path / "none", monkeypatch)
    assert "No runs recorded yet" in markdown
    assert not images


def test_scoreboard_with_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sample_records(tmp_path, monkeypatch)
    assert len(json.loads((tmp_path / "tesla-t4.json").read_text())) == 11
    markdown, images = _execute_scoreboard(tmp_path, monkeypatch)
    assert "No runs recorded yet" not in markdown
    for expected in ("{rubric} NVIDIA H100 80GB HBM3", "{rubric} Tesla T4", "<code>vector_add</code>",
                     "2<sup>26</sup> float32", "Demonstrations", "No measured fp8 ceiling"):
        assert expected in markdown, f"{expected!r} not in the Scoreboard's tables:\n{markdown}"
    real, demos = markdown.split("Demonstrations", 1)[0], markdown.rsplit("Demonstrations", 1)[1]
    assert "sum_atomic" not in real and "sum_atomic" in demos, "a demonstration among the results"
    rows = _rows(real.split("{rubric} Tesla T4")[0])  # the H100's table
    expected_cells = {
        "vector_add": {"Time, rate": "0.25 ms 3,221 GB/s", "% of ceiling": "91% of 1:1 copy",
                       "vs library": "1.04× faster than torch.add", "vs previous step": "–"},
        "matmul_1_naive": {"% of ceiling": "40% of cuBLAS fp32 GEMM"},
        "fma_intensity,": {"Time, rate": "20 ms 6.9 TFLOP/s", "% of ceiling": "40% of cuBLAS fp32 GEMM"},
        "hgemm": {"% of ceiling": "50% of cuBLAS fp16 GEMM"},
        # one int8 ceiling for the table: the fastest of the run, named (the library's run was 80% of its own)
        "igemm": {"% of ceiling": "100% of igemm wgmma: the fastest int8 of this run (cuBLAS int8 GEMM: "
                                  "344 TFLOP/s)", "vs library": "2.00× faster than torch._int_mm"},
        "torch._int_mm": {"% of ceiling": "50% of igemm wgmma: the fastest int8 of this run (cuBLAS int8 "
                                          "GEMM: 344 TFLOP/s)"},
        "fp8": {"% of ceiling": "– no measured fp8 ceiling on this GPU"},
        "split-K": {"% of ceiling": "80% of read-only stream", "vs library": "–",
                    "vs previous step": "10.00× faster than chunk 4096"},
        "row_sum_block": {"% of ceiling": "108% [1] of 1:1 copy"},
        "relu": {"vs library": "1.002× the speed of torch.relu"},
    }
    for kernel, cells in expected_cells.items():
        for column, text in cells.items():
            assert rows[kernel][column] == text, f"{kernel}, {column}: {rows[kernel][column]!r}, expected {text!r}"
    assert "[1] read-only: passes a 1:1 copy" in real
    assert "float32 · 0123456 " in rows["vector_add"]["Kernel"] + " " and "0123456789" not in real
    assert len(images) == 2, "one plot per GPU"
    multi = markdown.split("ring / NCCL all-reduce")[-1]
    assert "<td" in multi and "300 / 360 GB/s (83%)" in multi and "72%" in multi and "| GPUs |" not in markdown


# --- every built page in chromium -----------------------------------------------------------------

BUILT = (HTML / "index.html").is_file()
PAGES = sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
               if p.relative_to(HTML).parts[0] not in ("_static", "_sources", "_images")
               and p.name not in ("search.html", "genindex.html")) if BUILT else []


def _skip_reason() -> str | None:
    if not BUILT:
        if os.environ.get("CUDL_BOOK_BUILT") == "1":
            pytest.fail("CUDL_BOOK_BUILT=1 but _build/html/index.html does not exist")
        return "the book is not built (make test builds it first)"
    if not CHROMIUM.is_file():
        return f"{CHROMIUM} not installed (make browser installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (Python package) not installed"
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def site():
    """(base URL of _build/html served locally, a chromium browser)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=HTML))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM),
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            yield base, browser
        finally:
            browser.close()
            server.shutdown()


def _colab_url(page: str) -> str:
    repo = urlsplit(CONFIG["repository"]["url"]).path.strip("/").removesuffix(".git")
    branch = CONFIG["repository"].get("branch", "main")
    return f"{CONFIG['launch_buttons']['colab_url'].rstrip('/')}/github/{repo}/blob/{branch}/" \
           f"{page.removesuffix('.html')}.ipynb"


_IMAGES_NOT_LOADED = """async () => {
    const imgs = [...document.images];
    for (const img of imgs) img.loading = "eager";
    await Promise.all(imgs.map(img => img.complete ? null : new Promise(done => {
        img.addEventListener("load", done); img.addEventListener("error", done); setTimeout(done, 5000);
    })));
    return imgs.filter(img => !(img.naturalWidth > 0)).map(img => img.currentSrc || img.src);
}"""


def test_every_toc_entry_is_a_page() -> None:
    if not BUILT:
        pytest.skip(_skip_reason() or "")
    missing = [e for e in toc_files(TOC) if not (HTML / f"{e}.html").is_file()]
    assert not missing, f"in _toc.yml but not built: {missing}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", PAGES or [pytest.param("", marks=pytest.mark.skip(reason="the book is not built"))])
def test_page_in_browser(site, page: str) -> None:
    """No console error, no failed request, every image loaded, local links resolve, the right Colab link.

    Also: no `{{ repository_url }}`-style token left unsubstituted.
    """
    base, browser = site
    problems: list[str] = []
    external: set[str] = set()
    tab = browser.new_page()

    def route(r) -> None:
        url = r.request.url
        if url.startswith(base):
            r.continue_()
        else:  # no network needed: other hosts get an empty answer, and are checked against EXTERNAL_OK
            external.add(urlsplit(url).hostname or url)
            r.fulfill(status=200, body="")

    tab.route("**/*", route)
    tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    tab.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
    tab.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    try:
        tab.goto(base + page, wait_until="load", timeout=30_000)
        if page == "index.html":  # a redirect to the root page of _toc.yml
            tab.wait_for_url(f"{base}{TOC['root']}.html", wait_until="load", timeout=30_000)
        problems += [f"image not loaded: {src}" for src in tab.evaluate(_IMAGES_NOT_LOADED)]
        hrefs = tab.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
        here = tab.url
        if "{{ repository_" in tab.content():
            problems.append("a {{ repository_... }} token was not substituted (book/_ext/cudl_book.py)")
    finally:
        tab.close()
    problems += [f"loads from an unexpected host: {h}" for h in sorted(external - EXTERNAL_OK)]

    for href in hrefs:  # links inside the book point to files that exist
        target = urljoin(here, href)
        if target.startswith(base) and not href.startswith(("mailto:", "javascript:")):
            path = unquote(urlsplit(target).path)[len(urlsplit(base).path):]
            if not (HTML / path).exists() and not (HTML / path / "index.html").exists():
                problems.append(f"broken link: {href}")

    colab = sorted({h for h in hrefs if h.startswith("https://colab.research.google.com/")})
    if page.startswith(tuple(d + "/" for d in NOTEBOOK_DIRS)):
        expected = _colab_url(page)
        if colab != [expected]:
            problems.append(f"Colab link {colab}, expected [{expected}]")
        notebook = ROOT / f"{page.removesuffix('.html')}.ipynb"
        if not notebook.is_file():
            problems.append(f"the Colab link points to {notebook.relative_to(ROOT)}, which is not in the repository")
    elif colab:
        problems.append(f"Colab link on a page that is not a notebook: {colab}")
    assert not problems, f"{page}:\n" + "\n".join(problems)



# --- figures on a phone -----------------------------------------------------------------------------

FIGURE_PAGES = [p for p in PAGES if (HTML / p).is_file() and "<img" in (HTML / p).read_text(errors="replace")
                and not p.startswith("book/coming/")]
_IMAGE_WIDTHS = """() => [...document.querySelectorAll("article img, main img")]
    .filter(img => img.naturalWidth > 0 && img.offsetParent !== null)
    .map(img => ({src: img.currentSrc || img.src, right: img.getBoundingClientRect().right,
                  width: img.getBoundingClientRect().width, height: img.getBoundingClientRect().height,
                  aspect: img.naturalHeight / img.naturalWidth}))"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", FIGURE_PAGES or [pytest.param("", marks=pytest.mark.skip(reason="no figures"))])
def test_figures_fit_a_phone(site, page: str) -> None:
    """At 390 px (a phone), every figure of the page is scaled to fit the viewport, keeping its shape: no
    figure sticks out or is squeezed, and nothing else (a long inline identifier) makes the page wider than
    the screen."""
    base, browser = site
    tab = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.fulfill(status=200, body=""))
    try:
        tab.goto(base + page, wait_until="load", timeout=30_000)
        tab.evaluate(_IMAGES_NOT_LOADED)
        width = tab.evaluate("() => document.documentElement.clientWidth")
        page_width = tab.evaluate("() => document.documentElement.scrollWidth")
        images = tab.evaluate(_IMAGE_WIDTHS)
    finally:
        tab.close()
    assert page_width <= width + 1, f"{page}: the page is {page_width} px wide on a {width} px screen"
    too_wide = [f"{i['src'].rsplit('/', 1)[-1]}: right edge at {i['right']:.0f} px" for i in images
                if i["right"] > width + 1]
    assert not too_wide, f"{page}: figures wider than the {width} px viewport:\n" + "\n".join(too_wide)
    squeezed = [f"{i['src'].rsplit('/', 1)[-1]}: drawn {i['width']:.0f} x {i['height']:.0f} px" for i in images
                if abs(i["height"] - i["aspect"] * i["width"]) > 0.02 * i["height"] + 1]
    assert not squeezed, f"{page}: figures drawn out of shape (book/_ext/cudl_book.py):\n" + "\n".join(squeezed)


# --- code on a laptop-width window -----------------------------------------------------------------

_WIDE_CODE = """(width) => [...document.querySelectorAll("article div.highlight pre")]
    .filter(pre => Math.max(...pre.textContent.split("\\n").map(l => l.length)) <= width)
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => pre.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a)))"""


@pytest.mark.timeout(120)
def test_code_of_code_width_does_not_scroll(site) -> None:
    """At 1400 px, no code block whose lines are all within CODE_WIDTH columns needs a sideways scroll bar
    (book/_static/cudl.css sizes the code font for it): the 90-column rule is what readers see."""
    base, browser = site
    tab = browser.new_page(viewport={"width": 1400, "height": 900})
    tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.fulfill(status=200, body=""))
    try:
        tab.goto(base + "chapters/11-tensor-cores.html", wait_until="load", timeout=30_000)
        scrolling = tab.evaluate(_WIDE_CODE, CODE_WIDTH)
    finally:
        tab.close()
    assert not scrolling, "code within {} columns scrolls sideways:\n{}".format(CODE_WIDTH, "\n".join(scrolling))


# --- tables: every page renders them ----------------------------------------------------------------------

# A Markdown table that was not parsed shows its source: a separator row such as "| --- | --- |", or the
# header of one (the Scoreboard's multi-GPU table showed "| GPUs | ring / NCCL ... |"). In a paragraph,
# Sphinx's smart quotes make "---" an em dash and "--" an en dash ("| — | –: |": autotune's tables, parsed
# as CommonMark, were shown so in chapters 6 and 12).
_RAW_TABLE = re.compile(r"\|\s*:?(?:-{3,}|[—–]-*):?\s*\||\|\s*GPUs\s*\|")
_NOT_PROSE = re.compile(r"<(pre|code|script|style|textarea)\b.*?</\1>", re.DOTALL | re.IGNORECASE)


def _visible_text(html: str) -> str:
    from html import unescape

    return unescape(re.sub(r"<[^>]+>", " ", _NOT_PROSE.sub(" ", html)))


def test_raw_table_text_is_caught() -> None:
    assert _RAW_TABLE.search(_visible_text("<p>| GPUs | ring |<br>| --- | --- |</p>"))
    assert _RAW_TABLE.search(_visible_text("<p>| config | ms |\n| — | –: |</p>"))
    assert _RAW_TABLE.search(_visible_text("<p>| size (KB) | 1 |\n| :– | –: |</p>"))
    assert not _RAW_TABLE.search(_visible_text("<pre>| --- | --- |</pre><table><tr><td>GPUs</td></tr></table>"))


@pytest.mark.parametrize("page", PAGES or [pytest.param("", marks=pytest.mark.skip(reason="the book is not built"))])
def test_every_table_is_rendered(page: str) -> None:
    """No page shows a table's Markdown source as text (outside code blocks)."""
    text = _visible_text((HTML / page).read_text(errors="replace"))
    raw = [text[max(0, m.start() - 60):m.end() + 60].strip() for m in _RAW_TABLE.finditer(text)]
    assert not raw, f"{page}: Markdown table source shown as text:\n" + "\n".join(raw)


_RAW_CODE_SPAN = re.compile(r"`[^`\n]{1,80}`")


def test_raw_code_span_is_caught() -> None:
    assert _RAW_CODE_SPAN.search(_visible_text("<p>the top stall is `long_scoreboard` here</p>"))
    assert not _RAW_CODE_SPAN.search(_visible_text("<p>the top stall is <code>long_scoreboard</code></p>"
                                                   "<pre>x = `y`</pre>"))


@pytest.mark.parametrize("page", PAGES or [pytest.param("", marks=pytest.mark.skip(reason="the book is not built"))])
def test_no_code_span_shown_with_its_backticks(page: str) -> None:
    """Prose shows code as code: a glued sentence stored as text/plain only reached the site with its backticks
    (cudl.glue now stores a text/markdown twin, and `make sync` adds it to older runs)."""
    text = _visible_text((HTML / page).read_text(errors="replace"))
    raw = [text[max(0, m.start() - 50):m.end() + 20].strip() for m in _RAW_CODE_SPAN.finditer(text)]
    assert not raw, f"{page}: Markdown code spans shown as text:\n" + "\n".join(raw)


# A definition list whose term starts with "%" loses the term (MyST reads the line as a comment, "% of
# ceiling" on the Scoreboard did): the definition is then a paragraph that starts with ": ".
_LOST_TERM = re.compile(r"<p>\s*:\s")
_NOT_CODE_BLOCK = re.compile(r"<(pre|script|style|textarea)\b.*?</\1>", re.DOTALL | re.IGNORECASE)


def test_lost_definition_term_is_caught() -> None:
    assert _LOST_TERM.search("<!-- of ceiling --><p>: the rate</p>")
    assert not _LOST_TERM.search("<dl><dt>% of ceiling</dt><dd><p>the rate</p></dd></dl>")


@pytest.mark.parametrize("page", PAGES or [pytest.param("", marks=pytest.mark.skip(reason="the book is not built"))])
def test_no_definition_lost_its_term(page: str) -> None:
    html = (HTML / page).read_text(errors="replace")
    html = _NOT_CODE_BLOCK.sub(" ", html)  # inline code stays: "<p><code>x</code>: ..." is not a lost term
    lost = [html[m.start():m.start() + 80] for m in _LOST_TERM.finditer(html)]
    assert not lost, f"{page}: a definition without its term (escape a leading % as \\%):\n" + "\n".join(lost)


_SCOREBOARD_LAYOUT = """() => ({
    page: document.documentElement.scrollWidth, screen: document.documentElement.clientWidth,
    text: document.querySelector("article").innerText,
    tables: [...document.querySelectorAll("article table")].map(t => ({
        right: t.getBoundingClientRect().right, width: t.scrollWidth,
        room: t.parentElement.getBoundingClientRect().right,
        head: [...t.querySelectorAll("th")].map(th => th.innerText)})),
    images: [...document.querySelectorAll("article img")].map(i => i.getBoundingClientRect().height)})"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("width", [1400, 390])
def test_scoreboard_fits_the_screen(site, width: int) -> None:
    """The Scoreboard at 1400 px (a laptop) and 390 px (a phone): every table within the page (no column cut
    off or scrolled to), no table source as text, each chart at most one screen tall."""
    base, browser = site
    tab = browser.new_page(viewport={"width": width, "height": 900})
    tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.fulfill(status=200, body=""))
    try:
        tab.goto(base + "book/scoreboard.html", wait_until="load", timeout=30_000)
        tab.evaluate(_IMAGES_NOT_LOADED)
        layout = tab.evaluate(_SCOREBOARD_LAYOUT)
    finally:
        tab.close()
    assert layout["page"] <= layout["screen"] + 1, f"the page is {layout['page']} px wide at {width} px"
    assert layout["tables"], "no table on the Scoreboard"
    for t in layout["tables"]:
        assert t["right"] <= t["room"] + 1 and t["right"] <= width, f"a table ({t['head']}) runs past the page: {t}"
    assert not _RAW_TABLE.search(layout["text"]), "Markdown table source shown as text"
    assert layout["images"] and all(0 < h <= 900 for h in layout["images"]), f"chart heights {layout['images']}"


OUTPUT_TABLE_PAGES = [p for p in PAGES if re.search(r'class="cell_output[^"]*".*?<table', (HTML / p).read_text(
    errors="replace"), re.DOTALL)]
_OUTPUT_TABLES = """() => [...document.querySelectorAll("article .cell_output table")].map(t => ({
    head: t.querySelector("tr").innerText.replace(/\\s+/g, " ").slice(0, 60),
    width: t.getBoundingClientRect().width, room: t.parentElement.clientWidth}))"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", OUTPUT_TABLE_PAGES or [pytest.param("", marks=pytest.mark.skip(reason="no tables"))])
def test_output_tables_fit_a_phone(site, page: str) -> None:
    """At 390 px, a table that a cell prints fits the content column (book/_static/cudl.css): none scrolls
    sideways inside its box."""
    base, browser = site
    tab = browser.new_page(viewport={"width": 390, "height": 844})
    tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.fulfill(status=200, body=""))
    try:
        tab.goto(base + page, wait_until="load", timeout=30_000)
        tables = tab.evaluate(_OUTPUT_TABLES)
    finally:
        tab.close()
    wide = [f"{t['head']}: {t['width']:.0f} px in {t['room']} px" for t in tables if t["width"] > t["room"] + 1]
    assert not wide, f"{page}: tables wider than the column at 390 px:\n" + "\n".join(wide)


# --- stored outputs: no plumbing printed ------------------------------------------------------------------

# Notebooks whose stored outputs predate cudl.record's one-line display (they end a cell with cudl.record, and
# printed the record as a 25-line dict): re-executing them on a GPU removes the dict, and then this list must
# lose them (the test below fails until it does).
KNOWN_STALE_DICTS: dict[str, str] = {}


def _dict_outputs(notebook: Path) -> list[str]:
    """Stored results of cells that are a record's dict ({'chapter': ..., 'ms': ...})."""
    found = []
    for i, cell in enumerate(json.loads(notebook.read_text()).get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") != "execute_result":
                continue
            text = "".join(out.get("data", {}).get("text/plain", ""))
            if text.lstrip().startswith("{") and "'chapter'" in text and "'ms'" in text:
                found.append(f"cell {i}: {text[:70]!r}...")
    return found


def test_no_record_dict_in_stored_outputs() -> None:
    notebooks = sorted(p.relative_to(ROOT).as_posix() for d in ("chapters", "solutions", "exercises")
                       for p in (ROOT / d).glob("*.ipynb"))
    problems = []
    for nb in notebooks:
        found = _dict_outputs(ROOT / nb)
        if found and nb not in KNOWN_STALE_DICTS:
            problems.append(f"{nb} shows a record's dict (end the cell with something else):\n  " + "\n  ".join(found))
        elif nb in KNOWN_STALE_DICTS and not found:
            problems.append(f"{nb} no longer shows a record's dict: remove it from KNOWN_STALE_DICTS")
    problems += [f"{nb}: in KNOWN_STALE_DICTS but not a notebook" for nb in KNOWN_STALE_DICTS if nb not in notebooks]
    assert not problems, "\n".join(problems)


# --- CUDA in Python strings, heading numbers, a figure for phones (issue 23, "Pages") -------------


def _load_by_path(path: Path):
    """A module of book/ (not a package) imported from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernels_in_python_strings_lex_as_cuda() -> None:
    """book/_ext/cudl_lexer.py: the CUDA of a kernel string gets CUDA tokens, a `%%gpu` body Python tokens,
    other strings stay strings; and no code cell of any notebook yields an Error token (Sphinx would then
    show that whole cell without highlighting)."""
    pytest.importorskip("pygments")
    import nbformat
    from pygments.token import Comment, Error, Keyword, Name, String

    lexer = _load_by_path(ROOT / "book" / "_ext" / "cudl_lexer.py").CudlIPythonLexer()
    cell = ('%%gpu\nimport cudl\nsaxpy_src = r"""\nextern "C" __global__ void saxpy(float* y, int n) {\n'
            '    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per element\n}\n"""\n'
            'SCRIPT = """\nimport sys\n"""\n')
    tokens = list(lexer.get_tokens(cell))
    assert "".join(v for _, v in tokens) == cell
    kinds = {v: t for t, v in tokens}
    assert kinds["__global__"] in Keyword and kinds["threadIdx"] in Name.Builtin, tokens
    assert kinds["// one thread per element\n"] in Comment, tokens
    assert kinds["import"] in Keyword, "the body of a %%gpu cell is not lexed as Python"
    assert kinds["import sys"] in String, "a Python script in a string became CUDA"

    errors = []
    for path in sorted(p for d in ("chapters", "exercises", "solutions") for p in (ROOT / d).glob("*.ipynb")):
        for i, c in enumerate(nbformat.read(path, as_version=4).cells):
            if c.cell_type == "code":
                errors += [f"{path.relative_to(ROOT)} cell {i}: {v!r}" for t, v in lexer.get_tokens(c.source)
                           if t in Error]
    assert not errors, "Error tokens (the cell would lose its highlighting):\n" + "\n".join(errors[:20])


_HEADING = re.compile(r"<h([1-6])[^>]*>(.*?)</h\1>", re.S)
# "12.11.1.4. Question 12.4: ..." (the toc's number, then the title's own)
_DOUBLE_NUMBER = re.compile(r"^(\d+\.)+\s+[A-Z]\w* \d+\.\d+\b")


def test_built_pages_show_kernels_as_cuda_and_one_number_per_heading() -> None:
    """Every `*_src` kernel string of an exercise page carries CUDA token classes (`__global__` as `kr`),
    and no heading of any page carries two numbers (_toc.yml's `numbered` depth against manual titles)."""
    if not BUILT:
        pytest.skip(_skip_reason() or "the book is not built")
    problems = []
    for page in PAGES:
        html = (HTML / page).read_text(errors="replace")
        for _, inner in _HEADING.findall(html):
            text = re.sub(r"<[^>]+>", "", inner).replace("#", "").strip()
            if _DOUBLE_NUMBER.match(text):
                problems.append(f"{page}: heading {text!r} has two numbers")
        if page.startswith("exercises/"):
            blocks = re.findall(r'<div class="highlight-[\w-]+ notranslate">.*?</pre>', html, re.S)
            kernels = [b for b in blocks if re.search(r'_src</span>\s*<span class="o">=</span>', b)]
            if not kernels:
                problems.append(f"{page}: no `*_src = ...` kernel string found")
            problems += [f"{page}: a kernel string without CUDA highlighting: "
                         f"{re.sub(r'<[^>]+>', '', b)[-300:]!r}" for b in kernels
                         if '<span class="kr">__global__</span>' not in b]
    assert not problems, "\n".join(problems)


def test_stacked_mma_figure_is_up_to_date() -> None:
    """book/figures/mma-16816-owners-stacked.svg is what its script draws from chapter 11's function now."""
    figures = _load_by_path(ROOT / "book" / "figures" / "mma_16816_owners.py")
    assert figures.SVG.read_text() == figures.svg_text(), "run `python book/figures/mma_16816_owners.py`"


_OWNER_FIGURES = """() => {
    const visible = el => el && el.offsetParent !== null && el.getBoundingClientRect().width > 0;
    const cell = document.querySelector(".cell.tag_narrow-figure-follows .cell_output img");
    const svg = document.querySelector("img.narrow-figure");
    return {png: visible(cell), svg: visible(svg), svgWidth: svg ? svg.getBoundingClientRect().width : 0};
}"""


@pytest.mark.timeout(120)
def test_chapter11_owner_figure_is_readable_on_a_phone(site) -> None:
    """At 390 px the stacked SVG replaces chapter 11's wide ownership figure, at a width where its 11-unit
    lane numbers (in a 400-unit drawing) are at least 8 px tall; at 1400 px the notebook's figure shows."""
    base, browser = site
    seen = {}
    for width in (390, 1400):
        tab = browser.new_page(viewport={"width": width, "height": 900})
        tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.fulfill(status=200,
                                                                                                    body=""))
        try:
            tab.goto(base + "chapters/11-tensor-cores.html", wait_until="load", timeout=30_000)
            tab.evaluate(_IMAGES_NOT_LOADED)
            seen[width] = tab.evaluate(_OWNER_FIGURES)
        finally:
            tab.close()
    assert seen[390]["svg"] and not seen[390]["png"], seen
    assert seen[390]["svgWidth"] * 11 / 400 >= 8, seen
    assert seen[1400]["png"] and not seen[1400]["svg"], seen
