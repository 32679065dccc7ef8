"""The admin commands' tables (``python -m broker_store cluster``, ``offsets``), drawn by rich as ``jobs.lag``
draws its own: aligned columns on a terminal, and the same text, never cut, when the output goes to a pipe or a
file (rich's default there is 80 columns, which would fold long broker addresses)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table

UNBOUNDED_WIDTH = 10_000
"""Console width off a terminal: wide enough that no row is folded; a table is as wide as its widest row."""


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Iterable[str] = ()) -> Table:
    """A borderless table of ``rows`` (cells rendered with ``str``; ``None`` as ``-``); ``numeric`` columns are
    right-aligned. Cells are plain text: a ``[...]`` in a name is printed as it is, not read as markup."""
    right = set(numeric)
    out = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in columns:
        out.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    for row in rows:
        out.add_row(*("-" if cell is None else str(cell) for cell in row))
    return out


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Iterable[str] = (),
                file: TextIO | None = None) -> None:
    """Print :func:`table` to ``file`` (stdout), ending with a newline."""
    stream = file if file is not None else sys.stdout
    console = Console(file=stream, markup=False, highlight=False)
    if not console.is_terminal:
        console.width = UNBOUNDED_WIDTH
    console.print(table(columns, rows, numeric=numeric))
