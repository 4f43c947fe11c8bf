"""Sphinx extension: the CUDA C inside the notebooks' Python cells is highlighted as CUDA.

Exercise stubs and a few chapter examples hold a kernel in a Python string (`saxpy_src = r\"\"\"...\"\"\"`,
passed to `cudl.load` or a grader). Pygments' IPython lexer shows such a string as one colour, so the code a
student edits read as plain text. This registers, under the notebooks' lexer name (`ipython3`, from their
`language_info.pygments_lexer`, which myst-nb passes to Sphinx for every code cell), a lexer that

* hands the contents of a triple-quoted string to Pygments' `CudaLexer` when they are CUDA C or C++: a
  `__global__`/`__device__`/`__shared__`/`__constant__` qualifier, `extern "C"` or an `#include` line, or a
  string assigned to a name ending in `_src` (the exercises' convention);
* lexes the body of a `%%gpu` cell (cudl's cell magic) as Python: IPython's lexer knows only its own cell
  magics and leaves the body of any other one as plain text.

The notebooks themselves do not change (their code cells are hashed against their stored GPU outputs);
in JupyterLab or Colab the kernel is still an ordinary Python string.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pygments.lexer import bygroups
from pygments.lexers import find_lexer_class_by_name
from pygments.lexers.c_like import CudaLexer
from pygments.token import Error, Keyword, Operator, String, Text, Whitespace, _TokenType

# IPython's lexer (the package ipython_pygments_lexers, or IPython before 8.x), found through Pygments'
# registry as Sphinx itself would find it.
IPythonLexer = find_lexer_class_by_name("ipython3")

_QUOTES = ('"""', "'''")
_CUDA = re.compile(r'\b__(?:global|device|shared|constant)__\b|\bextern\s+"C"|^\s*#\s*include\s*[<"]', re.M)
# The name a string is assigned to, from the text before its opening quotes: `name = r` ... `"""`.
_ASSIGNED = re.compile(r"(\w+)\s*=\s*[A-Za-z]{0,2}$")


def is_cuda(content: str, before: str) -> bool:
    """Whether a triple-quoted string holds CUDA C/C++: by its contents, or by the `*_src` name it is given."""
    m = _ASSIGNED.search(before[-200:])
    return bool(_CUDA.search(content)) or bool(m and m.group(1).endswith("_src"))


class CudlIPythonLexer(IPythonLexer):
    """IPython 3 with CUDA inside triple-quoted kernel strings and Python inside `%%gpu` cells."""

    name = "IPython (cudl)"
    aliases = ["ipython3-cudl"]
    tokens = dict(IPythonLexer.tokens)
    # Before IPython's catch-all `%%name` rule, which would make the rest of the cell one Text token.
    tokens["root"] = [(r"(\s*)(%%)(gpu)([^\n]*\n)", bygroups(Whitespace, Operator, Keyword, Text)),
                      *IPythonLexer.tokens["root"]]

    def get_tokens_unprocessed(self, text: str, stack: Any = ("root",)) -> Iterator[tuple[int, _TokenType, str]]:
        # Python's lexer yields a triple-quoted string as the opening quotes, its contents in pieces and the
        # closing quotes (never a lone `"""` inside): hold the pieces until the string closes, then decide.
        held: list[tuple[int, _TokenType, str]] = []
        for index, ttype, value in super().get_tokens_unprocessed(text, stack):
            if not held:
                if ttype in String and value in _QUOTES:
                    held.append((index, ttype, value))
                else:
                    yield index, ttype, value
                continue
            held.append((index, ttype, value))
            if not (ttype in String and value == held[0][2]):
                continue
            start, end = held[0][0] + 3, index
            if is_cuda(text[start:end], text[:held[0][0]]):
                yield held[0]
                yield from _cuda_tokens(text[start:end], start)
                yield held[-1]
            else:
                yield from held
            held = []
        yield from held  # a string left open at the end of the cell


def _cuda_tokens(code: str, offset: int) -> Iterator[tuple[int, _TokenType, str]]:
    """CudaLexer's tokens of `code`, moved to `offset`. What it cannot lex stays string-coloured: an Error
    token would make Sphinx drop the highlighting of the whole cell."""
    for index, ttype, value in CudaLexer(stripnl=False).get_tokens_unprocessed(code):
        yield offset + index, (String if ttype in Error else ttype), value


def setup(app: Any) -> dict[str, Any]:
    app.add_lexer("ipython3", CudlIPythonLexer)
    app.add_lexer("ipython", CudlIPythonLexer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
