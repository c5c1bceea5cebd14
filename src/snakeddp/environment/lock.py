"""The pip locks (envs/*.lock): read them, and compare an installed environment with them.

A lock entry is ``name==version`` with the sha256 of every file the index serves for that version
(``--hash=sha256:...`` options, continued with ``\\`` as ``uv pip compile --generate-hashes`` writes
them), complete and exact; the installers require them (tools/setup.sh, the conda YAMLs, the image).
torch is locked by version: the build (``2.13.0+cpu`` here, a CUDA build on GPU clusters) is
``environment.cuda``'s, its hashes are those of every build that could be locked, and a CUDA build's
runtime wheels (nvidia-*, triton) are in that build's own lock (snakeddp.environment.builds).

    python -m snakeddp.environment.lock verify envs/requirements.lock [--optional envs/requirements-dev.lock]
    python -m snakeddp.environment.lock extra envs/requirements.lock envs/requirements-dev.lock  # in no lock
    python -m snakeddp.environment.lock drift envs/requirements.lock [--optional ...]  # one line, or nothing
    python -m snakeddp.environment.lock changed --record .venv/.snakeddp-verified envs/requirements.lock ...
        # installed packages whose lock entry is not the one they were verified against (to fetch and check again)
"""

from __future__ import annotations

import argparse
import email.parser
import functools
import importlib.metadata
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from snakeddp.errors import LockError

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#\\]+)(?P<options>(\s+--hash=\S+)*)$")
_HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")
_FROM = re.compile(r"^\s*# from (?P<index>\S+)\s*$")
_PYTHON = re.compile(r"^# Python (?P<version>\d+\.\d+)(\.\d+)?\b")
# Installed but never locked: the installer itself and this project (editable or not).
NOT_LOCKED = frozenset({"pip", "snakeddp"})
# The package whose build (CPU or CUDA) a machine chooses; its runtime wheels come with it.
ACCELERATED = "torch"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    #: sha256 of each file the lock accepts for this version (empty: a lock written without hashes).
    hashes: tuple[str, ...] = ()
    #: The index the lock resolved it from (uv's ``# from URL`` annotation), when the lock says.
    index: str | None = None

    def requirement(self) -> str:
        """The entry as pip and uv read it on one line: ``name==version --hash=sha256:...``."""
        return " ".join([f"{self.name}=={self.version}", *(f"--hash=sha256:{digest}" for digest in self.hashes)])


@dataclass
class Lock:
    """The pins of one or more lock files, keyed by canonical name, and the Python they are for."""

    pins: dict[str, Pin] = field(default_factory=dict)
    python: str | None = None

    def version(self, name: str) -> str | None:
        pin = self.pins.get(canonicalize_name(name))
        return pin.version if pin else None


def entries(text: str) -> list[tuple[int, str]]:
    """(first line number, entry) of a requirements text: comments and blank lines left out, lines
    continued with a backslash joined (uv writes each hash on a line of its own)."""
    found: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line.removesuffix("\\").strip())
        if not continued:
            found.append((start, " ".join(part for part in pending if part)))
            pending = []
    if pending:
        found.append((start, " ".join(part for part in pending if part)))
    return found


def annotated_indexes(text: str) -> dict[int, str]:
    """First line number of an entry -> the index of its ``# from URL`` annotation (uv writes it below the entry)."""
    starts = [number for number, _ in entries(text)]
    found = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        match = _FROM.match(raw)
        owner = max((start for start in starts if start < number), default=None) if match else None
        if match and owner is not None:
            found[owner] = match["index"]
    return found


def read_lock(*paths: str | Path) -> Lock:
    """Parse lock files; an entry that is not ``name==version`` with optional sha256 hashes (or a
    comment) is an error."""
    lock = Lock()
    for path in paths:
        text = Path(path).read_text(encoding="utf-8")
        for line in text.splitlines():
            found = _PYTHON.match(line.strip())
            if found and lock.python is None:
                lock.python = found["version"]
        indexes = annotated_indexes(text)
        for number, line in entries(text):
            pin = _PIN.match(line)
            if pin is None:
                raise LockError(
                    f"{path}:{number}: {line[:120]!r} is not an exact pin (name==version, with sha256 hashes). "
                    "HINT: locks are generated by tools/lock.sh; edit envs/requirements.in instead."
                )
            key = canonicalize_name(pin["name"])
            if key in lock.pins and lock.pins[key].version != pin["version"]:
                raise LockError(f"{path}:{number}: {pin['name']} is locked twice, at different versions")
            hashes = tuple(sorted({m["digest"] for m in _HASH.finditer(pin["options"] or "")}))
            lock.pins[key] = Pin(pin["name"], pin["version"], hashes, indexes.get(number))
    return lock


def site_packages() -> list[str]:
    """The running interpreter's own package directories (venv, conda env or image prefix).

    Snakemake's script preamble appends its own installation's directory to ``sys.path``, so a
    stage's conda env or container could otherwise appear to hold the host's packages.
    """
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def installed(paths: Iterable[str] | None = None) -> dict[str, Pin]:
    """Distributions installed in ``paths`` (default: the interpreter's site-packages)."""
    found: dict[str, Pin] = {}
    for dist in importlib.metadata.distributions(path=list(paths) if paths is not None else site_packages()):
        headers = metadata_headers(dist)
        name, version = headers.get("Name"), headers.get("Version")
        if name and version:
            found.setdefault(canonicalize_name(name), Pin(name, version))
    return dict(sorted(found.items()))


_HEADERS = email.parser.HeaderParser()


def metadata_headers(dist: importlib.metadata.Distribution) -> email.message.Message:
    """The core metadata's header fields (Name, Version, ...) without its body.

    ``dist.metadata`` parses the whole file, long description included (often the project's
    README), and ``dist.version`` parses it again: reading every installed distribution took
    70-100 ms that way here, 15-20 ms reading the headers alone. Every training run's provenance
    and every environment check reads them all.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    return _HEADERS.parsestr(text.partition("\n\n")[0])


def _without_local(version: str) -> str:
    return version.split("+", 1)[0]


def _listing_stamp(search: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The metadata directories in each directory of ``search``: installing, removing or changing the version
    of a distribution changes them."""
    return tuple(
        tuple(sorted(name for name in os.listdir(path) if name.endswith((".dist-info", ".egg-info"))))
        if os.path.isdir(path)
        else ()
        for path in search
    )


@functools.lru_cache(maxsize=8)
def _requirements(search: tuple[str, ...], stamp: tuple[tuple[str, ...], ...]) -> dict[str, tuple[str, ...]]:
    """Each distribution's requirements as written, by canonical name (the first found on ``search``), read from
    the metadata's header fields once per listing (``stamp``): a stage's closure is read for every stage and torch
    build, and ``dist.metadata`` and ``dist.requires`` each parsed the whole file, long description included
    (tools/lock.sh's YAMLs: 1,832 parses of it and 4,423 of requirements, 2 s of CPU)."""
    found: dict[str, tuple[str, ...]] = {}
    for dist in importlib.metadata.distributions(path=list(search)):
        headers = metadata_headers(dist)
        name = canonicalize_name(headers.get("Name") or "")
        if name not in found:
            # An egg-info's requirements are in its requires.txt, not the headers.
            listed = headers.get_all("Requires-Dist")
            found[name] = tuple(listed if listed is not None else (dist.requires or ()))
    return found


@functools.cache
def _parsed(text: str) -> Requirement | None:
    """One requirement, parsed when a closure reaches its package: parsing all 1,306 of the dev venv took 0.25 s
    of CPU in every check that compares the venv with the locks (torch's closure reaches a dozen)."""
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def requirement_closure(
    roots: Iterable[str], installed_pins: Mapping[str, Pin], paths: Iterable[str] | None = None
) -> set[str]:
    """Canonical names of ``roots`` and everything they require on this platform (markers and
    extras evaluated), read from the installed packages' metadata. Requirements that are not
    installed are left out; callers compare the result with a lock."""
    search = tuple(paths) if paths is not None else tuple(site_packages())
    requires = _requirements(search, _listing_stamp(search))
    todo = [(canonicalize_name(root), frozenset()) for root in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen or name not in installed_pins:
            continue
        seen.add((name, extras))
        names.add(name)
        for requirement in filter(None, map(_parsed, requires.get(name, ()))):
            wanted = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(env) for env in wanted):
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return names


@dataclass
class Comparison:
    """How an installed environment differs from the locks."""

    mismatched: list[tuple[str, str, str]] = field(default_factory=list)  # name, installed, locked
    missing: list[Pin] = field(default_factory=list)
    extra: list[Pin] = field(default_factory=list)
    accelerator: list[Pin] = field(default_factory=list)  # runtime wheels of torch's build

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra)

    def problems(self) -> list[str]:
        lines = [f"{name}: installed {have}, locked {want}" for name, have, want in self.mismatched]
        lines += [f"{pin.name}: locked {pin.version}, not installed" for pin in self.missing]
        lines += [f"{pin.name}: installed {pin.version}, not in the lock" for pin in self.extra]
        return lines


def _matches(installed_version: str, locked_version: str) -> bool:
    """Equal, or equal but for a local build label (``+cpu``) that the lock leaves out."""
    if "+" in locked_version:
        return installed_version == locked_version
    return _without_local(installed_version) == locked_version


def compare(
    installed_pins: Mapping[str, Pin],
    lock: Lock,
    optional: Lock | None = None,
    paths: Iterable[str] | None = None,
) -> Comparison:
    """Compare installed distributions (found in ``paths``, default the interpreter's
    site-packages) with a lock. Packages of the ``optional`` lock may be absent but must match
    when present; what the installed torch build requires is accepted."""
    result = Comparison()
    optional = optional or Lock()
    for key, pin in lock.pins.items():
        have = installed_pins.get(key)
        if have is None:
            result.missing.append(pin)
        elif not _matches(have.version, pin.version):
            result.mismatched.append((pin.name, have.version, pin.version))
    accelerator = requirement_closure([ACCELERATED], installed_pins, paths) - set(lock.pins)
    for key, pin in installed_pins.items():
        if key in lock.pins or key in NOT_LOCKED:
            continue
        if key in optional.pins:
            if not _matches(pin.version, optional.pins[key].version):
                result.mismatched.append((pin.name, pin.version, optional.pins[key].version))
            continue
        (result.accelerator if key in accelerator else result.extra).append(pin)
    return result


def changed(record: Path, lock: Lock, installed_pins: Mapping[str, Pin]) -> list[str]:
    """Installed packages whose entry in ``lock`` (version or hashes) differs from the one in ``record`` (what the
    venv was installed and verified from), or every installed one the lock names when there is no record: uv
    checks the hashes of what it installs, never of what is already there."""
    before = read_lock(record) if record.is_file() else Lock()
    return sorted(
        pin.name
        for key, pin in lock.pins.items()
        if key in installed_pins and key not in NOT_LOCKED and (key not in before.pins or before.pins[key] != pin)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.environment.lock", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["verify", "extra", "drift", "changed"])
    parser.add_argument("--record", type=Path, help="changed: the locks the venv was last verified against")
    parser.add_argument("locks", nargs="+", type=Path)
    parser.add_argument("--optional", nargs="+", type=Path, default=[], help="locks whose packages may be absent")
    args = parser.parse_args(argv)
    try:
        lock = read_lock(*args.locks)
        optional = read_lock(*args.optional)
    except (OSError, LockError) as error:
        print(f"envlock: {error}", file=sys.stderr)
        return 2
    if args.command == "changed":
        print("\n".join(changed(args.record, lock, installed())))
        return 0
    result = compare(installed(), lock, optional)
    if args.command == "extra":
        print("\n".join(pin.name for pin in result.extra))
        return 0
    if args.command == "drift":
        # tools/setup.sh's no-op path: what changed by hand since the last set-up, in one line.
        problems = result.problems()
        shown = "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if len(problems) > 3 else "")
        print(f"{len(problems)} difference(s) from the lock ({shown})" if problems else "")
        return 1 if problems else 0
    if not result.ok:
        print(f"envlock: {sys.prefix} differs from {', '.join(map(str, args.locks))}:", file=sys.stderr)
        print("\n".join(f"  {line}" for line in result.problems()), file=sys.stderr)
        print("HINT: reinstall from the locks (tools/setup.sh, or rebuild the image).", file=sys.stderr)
        return 1
    builds = f" (+ {len(result.accelerator)} runtime wheels of the torch build)" if result.accelerator else ""
    print(f"envlock: {len(lock.pins)} packages match {', '.join(map(str, args.locks))}{builds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
