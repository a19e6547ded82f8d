"""Rich tables whose numbers are never cut, whatever the terminal's width."""

from __future__ import annotations

from rich.align import AlignMethod
from rich.table import Table

__all__ = ["fitted_table"]


def fitted_table(
    title: str,
    header: list[str],
    rows: list[list[str]],
    wrap: int = 0,
    title_justify: AlignMethod = "center",
) -> Table:
    """A table whose columns are never narrower than their widest cell; the first
    ``wrap`` columns (text) may fold instead. The first column is left-aligned, the
    others (numbers) right-aligned. A table wider than the terminal is cropped at its
    right edge, never squeezed into cut numbers."""
    table = Table(title=title, title_justify=title_justify)
    for i, col in enumerate(header):
        if i < wrap:
            table.add_column(col, overflow="fold")
            continue
        widest = max((len(row[i]) for row in rows), default=0)
        table.add_column(col, justify="left" if i == 0 else "right", min_width=widest, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table
