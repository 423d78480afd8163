"""One rule for how wide the CLI's human output is: 80 columns unless ``--wide``.

Operators read these tables in an 80-column terminal, a ticket or a pager;
a 150-column line wraps into noise there.  Narrow output wraps (never cuts)
text that carries the diagnosis, and cuts only decoration; ``--wide`` prints
each record on one line as before, for grep and wide screens.  ``--json`` is
the machine interface, never this.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

WIDTH = 80

F = TypeVar("F", bound=Callable[..., Any])


def wide_option(fn: F) -> F:
    """The ``--wide`` flag, the same words on every command."""
    return click.option(
        "--wide", is_flag=True, help=f"One line per record, not wrapped at {WIDTH} columns."
    )(fn)


def clip(text: str, *, wide: bool = False, width: int = WIDTH) -> str:
    """``text`` cut to ``width`` with ``...`` (for decoration, never a diagnosis)."""
    if wide or len(text) <= width:
        return text
    return text[: max(width - 3, 0)] + "..."


def fill(
    text: str, *, wide: bool = False, width: int = WIDTH, indent: str = "", subsequent: str = ""
) -> str:
    """``indent + text`` wrapped to ``width`` (continuation lines start with
    ``subsequent``); ``wide``: one line."""
    if wide:
        return indent + text
    return textwrap.fill(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=subsequent,
        break_on_hyphens=False,
        break_long_words=True,
    )


def table(
    rows: Sequence[Sequence[str]], *, wide: bool = False, width: int = WIDTH, indent: str = "    "
) -> list[str]:
    """Rows of cells, columns aligned; the last cell is free text.

    Wide: every row on one line.  Narrow: a row whose line would pass
    ``width`` gets its last cell on the following line(s), wrapped and
    indented, so the aligned columns stay readable and nothing is lost.
    """
    if not rows:
        return []
    ncols = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(ncols)]
    out: list[str] = []
    for r in rows:
        head = "  ".join(c.ljust(w) for c, w in zip(r[:ncols], widths, strict=True))
        last = r[ncols]
        line = f"{head}  {last}" if last else head.rstrip()
        if wide or len(line) <= width:
            out.append(line)
            continue
        out.append(clip(head.rstrip(), width=width))
        out.append(fill(last, width=width, indent=indent, subsequent=indent))
    return out
