"""Sphinx extension of the book.

* `{{ repository_url }}` and `{{ repository_name }}` in a page's source. The repository URL is written
  once, in `_config.yml` (`repository.url`). Pages that show it (a `git clone` command, for instance)
  use these tokens, which are replaced before parsing so that they also work inside code blocks.
* Launch buttons (Colab, ...) only on the pages that are notebooks a reader runs: `chapters/` and
  `exercises/`. The Scoreboard is a notebook too, but it is executed when the book is built and a
  Colab link to its `.md` source would open nothing.
* Each script of a page once: under Jupyter Book 1, inline scripts of some extensions (sphinx-thebe,
  sphinx-togglebutton) reach the page twice (once with filename None, once with ""), and
  sphinx-thebe's second `const THEBE_JS_URL` is a JavaScript error on every page.
* Figures keep their shape on a phone: myst-nb gives every stored PNG a width and a height (half its
  pixels, for HiDPI); the theme narrows a wide image to the screen, but the fixed height stayed, so on a
  390 px phone a 756 x 488 figure was drawn 358 x 488, squeezed to half its width. Only the width is kept
  (the height follows it).
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

LAUNCHABLE = ("chapters/", "exercises/")


def _substitute(app: Sphinx, docname: str, source: list[str]) -> None:
    if "{{ repository_" not in source[0]:
        return
    url = app.config.html_theme_options.get("repository_url", "").rstrip("/")
    if not url:
        raise ValueError(f"{docname}: uses {{{{ repository_url }}}} but _config.yml has no repository.url")
    tokens = {"{{ repository_url }}": url, "{{ repository_name }}": url.rsplit("/", 1)[-1].removesuffix(".git")}
    for token, value in tokens.items():
        source[0] = source[0].replace(token, value)


def _launch_buttons_only_on_notebooks(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                                      doctree: Any) -> None:
    if pagename.startswith(LAUNCHABLE) or not isinstance(context.get("header_buttons"), list):
        return
    context["header_buttons"] = [b for b in context["header_buttons"]
                                 if not (isinstance(b, dict) and b.get("label") == "launch-buttons")]


def _scripts_once(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen: set[tuple[str, str]] = set()
    unique = []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""), repr(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def _images_keep_their_aspect(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for image in doctree.findall(nodes.image):
        if "width" in image and "height" in image:
            del image["height"]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", _substitute)
    app.connect("doctree-resolved", _images_keep_their_aspect)
    # sphinx-book-theme adds its launch buttons at priority 501; this runs after it.
    app.connect("html-page-context", _launch_buttons_only_on_notebooks, priority=502)
    app.connect("html-page-context", _scripts_once, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
