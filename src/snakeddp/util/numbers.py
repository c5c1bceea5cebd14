"""Numbers as people read them, on the report page, in the runs table and in the training log.

A module without imports: every training rank prints its epoch lines with ``readable``, and when it
came from the runs table (then built on pandas) each rank paid about 60 MB of RSS and a third of a
second for it (bench/results.md, 5.).
"""

from __future__ import annotations

from typing import Any


def readable(value: Any, digits: int = 4) -> str:
    """A value as people read it in the runs table (page and terminal): four significant digits below
    10,000, whole numbers with thousands separators above, – for none."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)
