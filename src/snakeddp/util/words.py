"""Words for messages and HINTs: lists of names in a sentence, counts with their nouns."""

from __future__ import annotations

from collections.abc import Iterable


def listed(names: Iterable[str], conjunction: str = "and") -> str:
    """``a, b and c`` (or ``a, b or c``); a single name as it is."""
    names = list(names)
    return ", ".join(names[:-1]) + f" {conjunction} {names[-1]}" if len(names) > 1 else "".join(names)


def counted(count: int, noun: str) -> str:
    """``1 run``, ``2 runs``: a count with its noun (a plain English plural: nouns of messages, not any word)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
