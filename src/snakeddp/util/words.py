"""Lists of names written out in a sentence, for messages and HINTs."""

from __future__ import annotations

from collections.abc import Iterable


def listed(names: Iterable[str], conjunction: str = "and") -> str:
    """``a, b and c`` (or ``a, b or c``); a single name as it is."""
    names = list(names)
    return ", ".join(names[:-1]) + f" {conjunction} {names[-1]}" if len(names) > 1 else "".join(names)
