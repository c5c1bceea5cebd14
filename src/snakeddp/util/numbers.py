"""Numbers as people read them, on the report page, in the runs table and in the training log, and sizes on disk.

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


def disk_size(size: int) -> str:
    """Bytes as `df -H`, `du --si` and the docs write them, scaled to the size: 870 B, 20.5 kB, 1.2 GB (powers of
    1,000). One style for every size the commands print (`snakeddp prune` and `prune --data`): a test run's
    checkpoints are kilobytes, which a fixed MiB showed as 0.0."""
    if size < 1000:
        return f"{size} B"
    for exponent, unit in enumerate(("kB", "MB", "GB"), start=1):
        shown = f"{size / 1000**exponent:.1f}"
        if float(shown) < 1000:  # 999,960 bytes: 1.0 MB, not 1000.0 kB
            return f"{shown} {unit}"
    return f"{size / 1000**4:.1f} TB"
