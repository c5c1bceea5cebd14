"""results.json (every raw sample) and results.md (one table, then each benchmark's notes).

Running one benchmark replaces its entry and keeps the others, so ``python -m bench NAME``
refreshes part of the report; each section says when and where it was measured. Both files are
committed: results.md is written from results.json and the hand notes beside it (notes.md: what was measured
outside ``python -m bench``, by section), so a partial run on a fresh checkout keeps the sections it did not rerun,
and a rerun keeps the hand notes of the sections it did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from snakeddp.util.fsutil import atomic_write_json, atomic_write_text, read_json

NOTES = "notes.md"
HEADER = (
    "# snakeddp benchmarks\n\n"
    "Written by `python -m bench` (`make bench`); raw samples in `bench/results.json`. Every ratio\n"
    "compares cases measured side by side in one run: each round runs every case back to back (in\n"
    "alternating order), the ratio is the median of the rounds' ratios and ours/baseline/limit are\n"
    "medians. Absolute numbers are context: they depend on the machine and its load (see each section).\n"
)


def load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"benchmarks": {}}
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return {"benchmarks": {}}
    return data if isinstance(data.get("benchmarks"), dict) else {"benchmarks": {}}


def merge(path: Path, results: Iterable[dict[str, Any]], order: list[str]) -> dict[str, Any]:
    """Replace the given benchmarks' entries in the JSON at ``path``; keep the rest; write it back."""
    data = load(path)
    for result in results:
        data["benchmarks"][result["name"]] = result
    data = in_order(data, order)
    atomic_write_json(path, json.loads(json.dumps(data, default=float)))
    return data


def in_order(data: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """``data`` with its benchmarks in ``order`` (results.json keeps them by name, results.md by number)."""
    return {**data, "benchmarks": {n: data["benchmarks"][n] for n in order if n in data["benchmarks"]}}


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if size >= 0.01 or size == 0 else f"{value:.2g}"


def _cell(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{_number(value)} {unit}".strip()


def _met(met: bool | None) -> str:
    return "—" if met is None else ("yes" if met else "**no**")


def hand_notes(path: Path) -> dict[str, list[str]]:
    """notes.md's bullets by benchmark name (its ``## name`` headings); none where there is no such file.

    A note is one line: any other text under a heading (a bullet wrapped onto a second line) is refused, where it
    would otherwise be left out of results.md without a word."""
    if not path.is_file():
        return {}
    notes: dict[str, list[str]] = {}
    section: list[str] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            section = notes.setdefault(line[3:].strip(), [])
        elif line.startswith("- ") and section is not None:
            section.append(line[2:])
        elif line.strip() and section is not None:
            raise ValueError(
                f"{path}:{number}: a note is one line that starts with '- ', not {line[:40]!r}. HINT: join it to "
                "the bullet above it."
            )
    return notes


def markdown(data: dict[str, Any], notes: dict[str, list[str]] | None = None) -> str:
    lines = [HEADER, "| figure | ours | baseline | ratio | limit | target | met? |", "|---|---|---|---|---|---|---|"]
    for bench in data["benchmarks"].values():
        lines.append(f"| **{bench['title']}** | | | | | | |")
        for fig in bench["figures"]:
            ratio = "—" if fig["ratio"] is None else f"{_number(fig['ratio'])} ({fig['ratio_of']})"
            lines.append(
                f"| {fig['label']} | {_cell(fig['ours'], fig['unit'])} | {_cell(fig['baseline'], fig['unit'])} "
                f"| {ratio} | {_cell(fig['limit'], fig['unit'])} | {fig['target'] or '—'} | {_met(fig['met'])} |"
            )
    for bench in data["benchmarks"].values():
        machine = bench.get("machine", {})
        lines += [
            "",
            f"## {bench['title']}",
            "",
            f"Measured {bench['started_at']} on {machine.get('host', '?')} ({machine.get('cpus', '?')} CPUs, "
            f"load average {machine.get('load_avg_1m', '?')} at the start of the run), in {bench['seconds']:.0f} s; "
            f"sizes: {', '.join(f'{k}={v}' for k, v in bench['sizes'].items())}.",
            "",
        ]
        lines += [f"- {note}" for note in [*bench["notes"], *(notes or {}).get(bench["name"], [])]]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, data: dict[str, Any]) -> None:
    """results.md at ``path``, from ``data`` and the hand notes beside it."""
    atomic_write_text(path, markdown(data, hand_notes(path.parent / NOTES)))
