"""envs/requirements.in, the one file a person edits: add, remove and pin its lines, and read which
stages a package added for the user's code belongs to (a ``# stages: train, report`` comment).

tools/add.sh runs this module, then tools/lock.sh and tools/setup.sh:

    python -m snakeddp.environment.requirements add envs/requirements.in humanize [--stage train]
    python -m snakeddp.environment.requirements remove envs/requirements.in humanize
    python -m snakeddp.environment.requirements pin envs/requirements.in envs/requirements.lock
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from snakeddp.environment.lock import read_lock
from snakeddp.errors import EnvFileError
from snakeddp.util.fsutil import atomic_write_text

STAGES = ("data", "train", "report")
DEFAULT_STAGE = "train"
_TAG = re.compile(r"#\s*stages:\s*(?P<stages>[\w ,-]*)$")
_LINE = re.compile(r"^(?P<requirement>[^#\s][^#]*?)\s*(?P<comment>#.*)?$")


def parse(text: str) -> Requirement:
    """``name``, ``name==version`` or ``name[extra]==version``; anything else is refused."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement as error:
        raise EnvFileError(
            f"{text!r} is not a package requirement ({error}). "
            "HINT: write NAME or NAME==VERSION, e.g. humanize==4.16.0."
        ) from None
    specifiers = list(requirement.specifier)
    if requirement.url or requirement.marker or len(specifiers) > 1 or any(s.operator != "==" for s in specifiers):
        raise EnvFileError(
            f"{text!r}: only exact pins go into envs/requirements.in. "
            "HINT: give an exact version (NAME==VERSION) or none, for the newest that fits the lock."
        )
    return requirement


def _entries(lines: list[str]) -> dict[str, int]:
    """Canonical name -> index of its line."""
    found = {}
    for index, line in enumerate(lines):
        match = _LINE.match(line.strip())
        if match:
            found[canonicalize_name(Requirement(match["requirement"]).name)] = index
    return found


def stage_additions(path: Path) -> dict[str, tuple[str, ...]]:
    """Stage -> the packages its ``# stages:`` comments add to it (canonical names)."""
    additions: dict[str, list[str]] = {stage: [] for stage in STAGES}
    if not path.is_file():
        return {stage: () for stage in STAGES}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _LINE.match(line.strip())
        tag = _TAG.search(match["comment"] or "") if match else None
        if tag:
            name = canonicalize_name(Requirement(match["requirement"]).name)
            for stage in filter(None, (s.strip() for s in tag["stages"].split(","))):
                if stage not in additions:
                    raise EnvFileError(
                        f"{path}: {name} names stage {stage!r}. HINT: a stage is one of {', '.join(STAGES)}."
                    )
                additions[stage].append(name)
    return {stage: tuple(names) for stage, names in additions.items()}


def add(path: Path, text: str, stages: list[str] | None) -> str:
    """Add ``text`` to the file, or change the pin of the line that has its name (keeping that line's
    comment unless ``stages`` are given). Returns the line written."""
    requirement = parse(text)
    for stage in stages or ():
        if stage not in STAGES:
            raise EnvFileError(f"--stage {stage!r} is not a stage. HINT: use one of {', '.join(STAGES)}.")
    lines = path.read_text(encoding="utf-8").splitlines()
    index = _entries(lines).get(canonicalize_name(requirement.name))
    comment = f"  # stages: {', '.join(stages or [DEFAULT_STAGE])}"
    if index is not None:
        old = _LINE.match(lines[index].strip())
        if stages is None and old["comment"]:
            comment = f"  {old['comment']}"
        elif stages is None:
            comment = ""
        lines[index] = f"{requirement}{comment}"
    else:
        lines.append(f"{requirement}{comment}")
    atomic_write_text(path, "\n".join(lines) + "\n")
    return lines[index if index is not None else -1]


def remove(path: Path, name: str) -> str:
    """Delete the line of package ``name``; returns it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    index = _entries(lines).get(canonicalize_name(name))
    if index is None:
        raise EnvFileError(f"{name} is not in {path}. HINT: tools/add.sh --remove takes a name that file lists.")
    removed = lines.pop(index)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return removed


def pin(path: Path, lock_path: Path) -> list[str]:
    """Give every unpinned line the version the lock resolved for it; returns the lines changed."""
    lock = read_lock(lock_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = []
    for index in _entries(lines).values():
        match = _LINE.match(lines[index].strip())
        requirement = Requirement(match["requirement"])
        version = lock.version(requirement.name)
        if requirement.specifier or version is None:
            continue
        requirement.specifier &= f"=={version.split('+')[0]}"
        lines[index] = f"{requirement}{'  ' + match['comment'] if match['comment'] else ''}"
        changed.append(lines[index])
    atomic_write_text(path, "\n".join(lines) + "\n")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.environment.requirements", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser("add")
    adding.add_argument("file", type=Path)
    adding.add_argument("requirement")
    adding.add_argument("--stage", action="append", dest="stages", help=f"one of {', '.join(STAGES)} (repeatable)")
    removing = commands.add_parser("remove")
    removing.add_argument("file", type=Path)
    removing.add_argument("name")
    pinning = commands.add_parser("pin")
    pinning.add_argument("file", type=Path)
    pinning.add_argument("lock", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            print(f"add: {args.file}: {add(args.file, args.requirement, args.stages)}")
        elif args.command == "remove":
            print(f"remove: {args.file}: {remove(args.file, args.name)}")
        else:
            for line in pin(args.file, args.lock):
                print(f"add: {args.file}: {line}")
    except (OSError, EnvFileError) as error:
        print(f"{args.command}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
