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


def test_shown_code_fits_the_page() -> None:
    """No line of a kernel file is wider than CODE_WIDTH columns."""
    files = shown_kernel_files()
    assert any(p.suffix == ".py" for p in files), "the shown-file pattern no longer finds triton_rows.py"
    wide = [f"{p.relative_to(ROOT)}:{i}: {len(line)} columns" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > CODE_WIDTH]
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


def _sample_records(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Benchmarks written by the real cudl.record, with the GPU faked."""
    import importlib

    from cudl.bench import Timing

    env, record = importlib.import_module("cudl.env"), importlib.import_module("cudl.record")  # cudl.record: a function

    monkeypatch.setattr(record, "on_gpu", lambda: True)
    for gpu, scale in (("NVIDIA H100 80GB HBM3", 1.0), ("Tesla T4", 10.0)):
        # ceilings such that vector_add reaches 91% of the copy and matmul_1_naive 40% of cuBLAS
        copy_gbps, gemm_tflops = 12 * 2**26 / 0.25e6 / 0.91 / scale, 2 * 4096**3 / 20e9 / 0.40 / scale
        monkeypatch.setattr(Timing, "pct_of_ceiling", lambda self, c=copy_gbps, g=gemm_tflops: (
            (100 * self.gbps / c, "measured copy bandwidth") if self.bytes
            else (100 * self.tflops / g, f"cuBLAS {self.compute}")))
        monkeypatch.setattr(env, "device_info", lambda gpu=gpu: {
            "gpu": gpu, "cc": "9.0", "driver": "12.8", "runtime": "12.8", "cupy": "13.4.0", "torch": None,
            "numpy": "2.2.0"})
        n = 2**26
        vadd = Timing("vector_add", 0.25 * scale, 0.24 * scale, 0.26 * scale, 50, bytes=12 * n)
        torch_add = Timing("torch.add", 0.26 * scale, 0.25 * scale, 0.27 * scale, 50, bytes=12 * n)
        mm = Timing("matmul_1_naive", 20 * scale, 19 * scale, 21 * scale, 20, flops=2 * 4096**3)
        out = path / f"{record.gpu_slug(gpu)}.json"
        record.record(vadd, chapter="01-first-kernel", shape=n, dtype="float32", baseline=torch_add, path=out)
        record.record(mm, chapter="05-matmul", shape=(4096, 4096, 4096), dtype="float32", path=out)
        # above the ridge point: compute-bound although it has bytes (the page must not show 91% of copy)
        fma = Timing("fma_intensity, iters=1024", 20 * scale, 19 * scale, 21 * scale, 20, bytes=8 * n,
                     flops=2 * 1024 * n)
        record.record(fma, chapter="02-execution-model", shape=n, dtype="float32", path=out)
        atomic = Timing("sum_atomic", 76.3 * scale, 76 * scale, 77 * scale, 5, bytes=4 * n)
        torch_sum = Timing("torch.sum", 0.1 * scale, 0.09 * scale, 0.11 * scale, 50, bytes=4 * n)
        record.record(atomic, chapter="04-reductions", shape=n, dtype="float32", baseline=torch_sum,
                      path=out, demo=True)


def test_scoreboard_without_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    markdown, images = _execute_scoreboard(tmp_path / "none", monkeypatch)
    assert "No runs recorded yet" in markdown
    assert not images


def test_scoreboard_with_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sample_records(tmp_path, monkeypatch)
    assert len(json.loads((tmp_path / "tesla-t4.json").read_text())) == 4
    markdown, images = _execute_scoreboard(tmp_path, monkeypatch)
    assert "No runs recorded yet" not in markdown
    for expected in ("{rubric} NVIDIA H100 80GB HBM3", "{rubric} Tesla T4", "<code>vector_add</code>",
                     "<code>matmul_1_naive</code>", "3,221 GB/s (91%)", "1.04× faster than torch.add",
                     "2<sup>26</sup> float32", "(40%)", "6.87 TFLOP/s (40%) compute-bound",
                     "763× slower than torch.sum", "Demonstrations"):
        assert expected in markdown, f"{expected!r} not in the Scoreboard's tables:\n{markdown}"
    real, demos = markdown.split("Demonstrations", 1)[0], markdown.rsplit("Demonstrations", 1)[1]
    assert "sum_atomic" not in real and "sum_atomic" in demos, "a demonstration among the results"
    assert len(images) == 2, "one plot per GPU"


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
                  width: img.getBoundingClientRect().width}))"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", FIGURE_PAGES or [pytest.param("", marks=pytest.mark.skip(reason="no figures"))])
def test_figures_fit_a_phone(site, page: str) -> None:
    """At 390 px (a phone), every figure of the page is scaled to fit the viewport: no figure sticks out, and
    nothing else (a long inline identifier) makes the page wider than the screen."""
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
