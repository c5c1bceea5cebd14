"""Writing the locks: what tools/lock.sh runs between uv's resolutions, so the locks are written one way.

uv resolves (``uv pip compile --generate-hashes --emit-index-annotation``); this module turns its
outputs into the committed files, the same bytes for the same resolution:

    envs/requirements.lock               the core, every package with the sha256 of each of its files
    envs/requirements-dev.lock           the test tools and extras on top
    envs/requirements-azureml-v1.lock    the SDK v1's venv, complete
    envs/requirements-torch-<cuda>.lock  each torch build of ``environment.cuda``: torch with that build's hashes,
                                         and the runtime wheels (nvidia-*, triton) it adds to the core

torch is locked by version (``torch==2.13.0``): its hashes are those of every build that could be locked,
the wheel a find-links directory gave this machine included (uv writes no hash for a find-links file; its
sha256 is computed here), so the core lock installs the build a machine takes and nothing else.

    python -m snakeddp.environment.locking prepare envs WORK [--upgrade]  # what the resolutions start from
    python -m snakeddp.environment.locking preferences envs/requirements.lock ...  # name==version, for uv
    python -m snakeddp.environment.locking undecided RESOLVED --by FILE...  # what no pin in FILEs decided
    python -m snakeddp.environment.locking write WORK OUT --python 3.11.7 --machine x86_64 [--cooldown LINE]
    python -m snakeddp.environment.locking agree OUT  # each lock names the files its pylock.<name>.toml names
    python -m snakeddp.environment.locking same RESOLVED... --as FILE... --python 3.12 3.13 --here 3.11  # others'
    python -m snakeddp.environment.locking unheld REQUIREMENTS --site DIR [--keep NAME...]  # what DIR lacks of them
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from snakeddp.environment.builds import BUILDS, TorchBuild
from snakeddp.environment.lock import ACCELERATED, Pin, annotated_indexes, entries
from snakeddp.errors import LockError

_LINE_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#\\]+)")
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#\\]+)(?P<options>.*)$")
_HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")
_CONFLICT = ("<<<<<<<", "=======", ">>>>>>>", "|||||||")
CORE, DEV, V1 = "requirements.lock", "requirements-dev.lock", "requirements-azureml-v1.lock"
V1_IN = "envs/requirements-azureml-v1.in"
INS = ("requirements.in", "requirements-dev.in", "requirements-azureml-v1.in")
# Each lock's PEP 751 twin (pylock.<name>.toml: the standard lock format, for scanners, auditors and other
# installers), from the locks it installs with: the dev lock is installed on top of the core's.
PYLOCKS = {
    CORE: ("pylock.requirements.toml", (CORE,)),
    DEV: ("pylock.requirements-dev.toml", (CORE, DEV)),
    V1: ("pylock.requirements-azureml-v1.toml", (V1,)),
}


def build_lock_name(build: TorchBuild) -> str:
    """envs/requirements-torch-<cuda>.lock: one per ``environment.cuda`` value."""
    return f"requirements-torch-{build.cuda}.lock"


def preferences(paths: Iterable[Path]) -> list[str]:
    """``name==version`` of every package the old locks hold, as uv's preferences: a lock left with a merge's
    conflict markers still gives every package both sides agree on (one that differs is resolved afresh), and
    torch is left out (its version is the .in file's, its build the machine's)."""
    versions: dict[str, set[str]] = {}
    names: dict[str, str] = {}
    for path in paths:
        if not path.is_file():
            continue
        for raw in path.read_text(encoding="utf-8").splitlines():
            if raw.startswith(_CONFLICT):
                continue
            pin = _LINE_PIN.match(raw)
            if pin:
                key = canonicalize_name(pin["name"])
                names.setdefault(key, pin["name"])
                versions.setdefault(key, set()).add(pin["version"])
    return [
        f"{names[key]}=={next(iter(found))}"
        for key, found in sorted(versions.items())
        if len(found) == 1 and key != ACCELERATED
    ]


def prepare(envs: Path, work: Path, upgrade: bool) -> list[str]:
    """What tools/lock.sh resolves from, written into ``work`` in one Python start (fifteen starts of 0.13 s of
    CPU each before): denied.txt, the constraints that keep denied releases out; builds.txt, each build's
    ``<cuda> <label or -> <index>``; the old locks in ``envs`` as uv's preferences, all.txt (core and dev),
    v1-kept.txt and build-<cuda>.txt (empty with ``upgrade``: everything afresh); envs/cooldown.toml's cutoff as
    uv's arguments (cooldown-args.txt, one a line) and the locks' header line (cooldown-header.txt), from one
    reading of the clock. Returns one line for each pin of the .in files that envs/denied.toml refuses."""
    # advisories imports urllib.request: 50 ms each undecided or write would not use.
    from snakeddp.environment import advisories, cooldown

    wait, today = cooldown.load(envs / "cooldown.toml"), datetime.now(UTC)
    (work / "cooldown-args.txt").write_text(_lines(wait.uv_args(today)), encoding="utf-8")
    (work / "cooldown-header.txt").write_text(_lines([wait.header(today)]), encoding="utf-8")
    denials = advisories.load()
    (work / "denied.txt").write_text(_lines(advisories.constraints(denials)), encoding="utf-8")
    (work / "builds.txt").write_text(
        _lines(f"{cuda} {b.label or '-'} {b.index_url}" for cuda, b in BUILDS.items()), encoding="utf-8"
    )
    kept = {"all.txt": [CORE, DEV], "v1-kept.txt": [V1]}
    kept.update({f"build-{cuda}.txt": [build_lock_name(build)] for cuda, build in BUILDS.items()})
    for name, locks in kept.items():
        (work / name).write_text(
            "" if upgrade else _lines(preferences(envs / lock for lock in locks)), encoding="utf-8"
        )
    return advisories.check_requirements([], [envs / name for name in INS], denials)


def _lines(lines: Iterable[str]) -> str:
    """One a line and a newline at the end, as print wrote them for the shell (a lone newline where there are none)."""
    return "\n".join(lines) + "\n"


def _exact_pins(path: Path) -> dict[str, list[SpecifierSet]]:
    """Canonical name -> the ``==`` specifiers of every exact pin in a requirements file (an .in file, an old
    lock, preferences); lines that are no exact pin (options, hashes, comments, a bare name) decide nothing."""
    pins: dict[str, list[SpecifierSet]] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip().removesuffix("\\").strip()
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        specifiers = list(requirement.specifier)
        if len(specifiers) == 1 and specifiers[0].operator == "==":
            pins.setdefault(canonicalize_name(requirement.name), []).append(requirement.specifier)
    return pins


def undecided(resolved: Path, decided_by: Iterable[Path]) -> list[str]:
    """``name==version`` of each package of a resolution that no exact pin in ``decided_by`` (the .in files, the old
    locks) allows: empty when nothing was left to choose, so an offline resolution from uv's cache is the one
    the index gives (a pin ``torch==2.13.0`` allows the machine's ``2.13.0+cpu``)."""
    pins: dict[str, list[SpecifierSet]] = {}
    for path in decided_by:
        for name, found in _exact_pins(path).items():
            pins.setdefault(name, []).extend(found)
    left = []
    for key, entry in sorted(read_compiled(resolved).items()):
        try:
            version = Version(entry.pin.version)
        except InvalidVersion:
            version = None
        if version is None or not any(spec.contains(version, prereleases=True) for spec in pins.get(key, [])):
            left.append(f"{entry.pin.name}=={entry.pin.version}")
    return left


@dataclass(frozen=True)
class Entry:
    """One package of a resolution: its pin, the sha256 of its files, and the index uv found it on."""

    pin: Pin
    index: str | None = None

    @property
    def key(self) -> str:
        return canonicalize_name(self.pin.name)

    def text(self) -> str:
        lines = [f"{self.pin.name}=={self.pin.version}", *(f"    --hash=sha256:{d}" for d in self.pin.hashes)]
        body = " \\\n".join(lines)
        return body + (f"\n    # from {self.index}" if self.index else "") + "\n"


def read_compiled(path: Path) -> dict[str, Entry]:
    """uv's output (``--generate-hashes --emit-index-annotation``) by canonical name."""
    text = path.read_text(encoding="utf-8")
    indexes = annotated_indexes(text)
    result = {}
    for number, line in entries(text):
        match = _ENTRY.match(line)
        if match is None:
            raise LockError(f"{path}:{number}: uv wrote {line[:120]!r}, which is not a pin with hashes")
        hashes = tuple(sorted({m["digest"] for m in _HASH.finditer(match["options"])}))
        entry = Entry(Pin(match["name"], match["version"], hashes), indexes.get(number))
        result[entry.key] = entry
    return result


def find_links_hashes(entry: Entry) -> tuple[str, ...]:
    """sha256 of the files of ``entry``'s version in the find-links directory uv took it from (uv hashes none)."""
    if not entry.index or not entry.index.startswith("file://"):
        return ()
    folder = Path(entry.index.removeprefix("file://"))
    stem = re.sub(r"[-_.]+", "_", entry.pin.name).lower()
    files = [
        path
        for path in sorted(folder.glob("*"))
        if re.sub(r"[-_.]+", "_", path.name.split("-")[0]).lower() == stem
        and path.name.split("-")[1:2] == [entry.pin.version]
        and (path.suffix == ".whl" or path.name.endswith(".tar.gz"))
    ]
    return tuple(sorted(hashlib.sha256(path.read_bytes()).hexdigest() for path in files))


def hashed(entries_: Mapping[str, Entry], source: str) -> dict[str, Entry]:
    """Every entry with hashes: find-links files hashed here; an entry with none is a LockError."""
    result = {}
    for key, entry in entries_.items():
        if not entry.pin.hashes:
            entry = replace(entry, pin=replace(entry.pin, hashes=find_links_hashes(entry)))
        if not entry.pin.hashes:
            raise LockError(
                f"{source}: uv gave {entry.pin.name}=={entry.pin.version} (from {entry.index or 'no index'}) no hash, "
                "and no file of it could be hashed here. HINT: install it from an index or a find-links folder."
            )
        result[key] = entry
    return result


def _torch(core: Mapping[str, Entry], builds: Mapping[str, Mapping[str, Entry]]) -> Entry:
    """The core lock's torch: the version without a build label, with the hashes of every build that was locked."""
    mine = core[ACCELERATED]
    version = mine.pin.version.split("+")[0]
    digests = set(mine.pin.hashes)
    for locked in builds.values():
        if ACCELERATED in locked:
            digests |= set(locked[ACCELERATED].pin.hashes)
    return Entry(Pin(mine.pin.name, version, tuple(sorted(digests))), None)


def _torch_note(
    core: Mapping[str, Entry], builds: Mapping[str, Mapping[str, Entry]], missing: Mapping[str, str]
) -> str:
    mine = core[ACCELERATED]
    here = (
        ""
        if mine.index in (None, "https://pypi.org/simple")
        else f" and of the build this machine takes ({mine.pin.version}, from {mine.index})"
    )
    locked = ", ".join(f'"{cuda}"' for cuda in builds) or "none"
    text = (
        f"# torch: the hashes of every file of the builds locked in envs/requirements-torch-*.lock ({locked}){here}.\n"
    )
    if missing:
        text += "".join(f'# Not hashed: environment.cuda "{cuda}" ({why}).\n' for cuda, why in missing.items())
    return text


def _header(title: str, sources: str, python: str, machine: str, cooldown: str = "") -> str:
    return (
        f"# {title}\n"
        f"# Generated by tools/lock.sh from {sources}; do not edit by hand.\n"
        f"# Python {python}, {machine}. Every file's sha256 is here: the installers require them.\n"
        + (f"{cooldown}\n" if cooldown else "")
    )


def render(entries_: Iterable[Entry], header: str, torch_note: str = "") -> str:
    body = ""
    for entry in sorted(entries_, key=lambda e: f"{e.pin.name}=={e.pin.version}"):
        if entry.key == ACCELERATED:
            body += torch_note
        body += entry.text()
    return header + body


def write(work: Path, out: Path, python: str, machine: str, cooldown: str = "") -> list[Path]:
    """The locks from uv's outputs in ``work`` (all.txt, core.txt, v1.txt, build-<cuda>.txt or build-<cuda>.missing)."""
    all_, core = (
        hashed(read_compiled(work / "all.txt"), "core and dev"),
        hashed(read_compiled(work / "core.txt"), "core"),
    )
    v1 = hashed(read_compiled(work / "v1.txt"), "SDK v1")
    builds: dict[str, dict[str, Entry]] = {}
    missing: dict[str, str] = {}
    for cuda in BUILDS:
        compiled, why = work / f"build-{cuda}.txt", work / f"build-{cuda}.missing"
        if compiled.is_file():
            builds[cuda] = hashed(read_compiled(compiled), f"torch build {cuda}")
        else:
            missing[cuda] = why.read_text(encoding="utf-8").strip() if why.is_file() else "not resolved"
    torch = _torch(core, builds)
    note = _torch_note(core, builds, missing)
    core = {**core, ACCELERATED: torch}
    # The core's torch has lost its build label: it is the same package as the joint resolution's.
    dev = {k: e for k, e in all_.items() if k not in core or core[k].pin.version != e.pin.version.split("+")[0]}
    if ACCELERATED in v1:
        v1[ACCELERATED] = torch
    out.mkdir(parents=True, exist_ok=True)
    written = []
    core_title = "Exact versions of every package snakeddp's core installs (tools/setup.sh)."
    dev_title = "Test, lint and optional-extra packages on top of requirements.lock (tools/setup.sh --dev)."
    v1_title = "Every package of .venv-azureml-v1, the AzureML SDK v1's venv (tools/setup.sh --azureml-v1)."
    files = {
        CORE: render(core.values(), _header(core_title, "envs/requirements.in", python, machine, cooldown), note),
        DEV: render(
            dev.values(),
            _header(dev_title, "envs/requirements.in and envs/requirements-dev.in", python, machine, cooldown),
        ),
        V1: render(
            v1.values(), _header(v1_title, "envs/requirements.in and " + V1_IN, python, machine, cooldown), note
        ),
    }
    for build in BUILDS.values():
        title = (
            f"torch's build for environment.cuda \"{build.cuda}\" ({build.index_url}): torch with this build's hashes, "
            "and what it adds to requirements.lock."
        )
        header = _header(title, "envs/requirements.in", python, machine, cooldown)
        if build.cuda in missing:
            files[build_lock_name(build)] = header + (
                f"# Not locked: {missing[build.cuda]}. Every installer refuses this build until tools/lock.sh runs "
                f"where {build.index_url} answers.\n"
            )
            continue
        locked = builds[build.cuda]
        added = [e for k, e in locked.items() if k == ACCELERATED or k not in core]
        files[build_lock_name(build)] = render(added, header)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written


def differences(resolved: Path, expected: Iterable[Path]) -> list[str]:
    """``+name==version`` for what ``resolved`` (another Python's resolution) holds and ``expected`` (this Python's,
    torch's build last: its torch replaces the machine's) does not, ``-name==version`` the other way round."""
    want: dict[str, str] = {}
    for path in expected:
        want.update({key: entry.pin.version for key, entry in read_compiled(path).items()})
    got = {key: entry.pin.version for key, entry in read_compiled(resolved).items()}
    return [
        *(f"+{key}=={version}" for key, version in sorted(got.items()) if want.get(key) != version),
        *(f"-{key}=={version}" for key, version in sorted(want.items()) if got.get(key) != version),
    ]


def pylock_files(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """A pylock.toml's packages: canonical name -> (version, the sha256 of every file it names)."""
    named = {}
    for package in tomllib.loads(path.read_text(encoding="utf-8")).get("packages", []):
        files = [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]
        digests = frozenset(file["hashes"]["sha256"] for file in files)
        named[canonicalize_name(package["name"])] = (str(package["version"]), digests)
    return named


def _kept_hashes(text: str, source: str, named: Mapping[str, tuple[str, frozenset[str]]]) -> str:
    """``text`` (a lock) with each entry's hashes those of the files its pylock names; torch keeps its own (every
    build's, and the wheel this machine's find-links folder gives, which no index lists)."""
    out: list[str] = []
    key, pending = None, []  # the entry being read: its first line, then its kept hash lines

    def flush() -> None:
        if key is None:
            return
        digests = [line.split("sha256:")[1].split()[0] for line in pending]
        lines = [out.pop(), *(f"    --hash=sha256:{digest}" for digest in digests)]
        out.append(" \\\n".join(lines))

    for line in text.splitlines():
        entry = _ENTRY.match(line)
        if entry or not line.startswith("    --hash="):
            flush()
            key, pending = None, []
        if entry:
            key = canonicalize_name(entry["name"])
            version = entry["version"]
            if key not in named or named[key][0] != version:
                found = named.get(key, ("no version",))[0]
                raise LockError(f"{source}: {entry['name']}=={version}, and its pylock.toml names {found}")
            out.append(f"{entry['name']}=={entry['version']}")
        elif line.startswith("    --hash="):
            digest = _HASH.search(line)
            if digest and (key == ACCELERATED or digest["digest"] in named[key][1]):
                pending.append(line)
        else:
            out.append(line)
    flush()
    return "\n".join(out) + "\n"


def agree(out: Path) -> None:
    """Each lock of ``out`` names the files its pylock.toml names: uv's requirements output hashes every file of a
    version, those for Pythons the locks are not for (cp310) included, its pylock.toml only the files a Python
    the locks are for can install. A package or version that differs is a LockError."""
    for lock, (pylock, sources) in PYLOCKS.items():
        named = pylock_files(out / pylock)
        locked = {k for source in sources for k in read_compiled(out / source)}
        if set(named) != locked:
            raise LockError(f"{pylock} and {', '.join(sources)} name other packages: {sorted(set(named) ^ locked)}")
        (out / lock).write_text(_kept_hashes((out / lock).read_text(encoding="utf-8"), lock, named), encoding="utf-8")


def requirement_entries(text: str) -> list[tuple[str, str]]:
    """The entries of a requirements file as tools/uv.sh's hashed_requirements prints it (lock entries with their
    hash and index lines; ``name @ URL --hash=...`` for a find-links wheel): (canonical name, the entry's text)."""
    found: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if re.match(r"[A-Za-z0-9]", line):
            name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)[0]
            found.append((canonicalize_name(name), line))
        elif found and line[:1].isspace():
            found[-1] = (found[-1][0], found[-1][1] + line)
    return found


def unheld(requirements: Path, site: Path, keep: Iterable[str] = ()) -> str:
    """The entries of ``requirements`` that ``site`` does not hold as installing them would: ``name==version`` at
    that version from an index (no direct_url.json), ``name @ URL`` from that URL; and those of ``keep`` whatever
    it holds. tools/lock.sh installs only these for the stage YAMLs' metadata and reads the rest from the venv."""
    from importlib.metadata import distributions

    from snakeddp.environment.lock import metadata_headers

    held: dict[str, tuple[str, str | None]] = {}
    for dist in distributions(path=[str(site)]):
        headers = metadata_headers(dist)
        if headers.get("Name") and headers.get("Version"):
            direct = dist.read_text("direct_url.json")
            url = json.loads(direct).get("url") if direct else None
            held.setdefault(canonicalize_name(headers["Name"]), (headers["Version"], url))
    kept = {canonicalize_name(name) for name in keep}
    out = []
    for key, entry in requirement_entries(requirements.read_text(encoding="utf-8")):
        version, url = held.get(key, (None, None))
        pin = _LINE_PIN.match(entry)
        if pin:
            same = version is not None and url is None and _same_version(version, pin["version"])
        else:
            named = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*@\s*(\S+)", entry)
            same = named is not None and url == named[1]
        if key in kept or not same:
            out.append(entry if entry.endswith("\n") else entry + "\n")
    return "".join(out)


def _same_version(installed: str, locked: str) -> bool:
    try:
        return Version(installed) == Version(locked)
    except InvalidVersion:
        return installed == locked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.environment.locking", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    preparing = commands.add_parser("prepare")
    preparing.add_argument("envs", type=Path)
    preparing.add_argument("work", type=Path)
    preparing.add_argument("--upgrade", action="store_true")
    preferring = commands.add_parser("preferences")
    preferring.add_argument("locks", nargs="*", type=Path)
    deciding = commands.add_parser("undecided")
    deciding.add_argument("resolved", type=Path)
    deciding.add_argument("--by", nargs="+", type=Path, required=True)
    comparing = commands.add_parser("same")
    comparing.add_argument("resolved", nargs="+", type=Path, help="one resolution for each --python, in order")
    comparing.add_argument("--as", dest="expected", nargs="+", type=Path, required=True)
    comparing.add_argument("--python", nargs="+", required=True)
    comparing.add_argument("--here", required=True)
    holding = commands.add_parser("unheld")
    holding.add_argument("requirements", type=Path)
    holding.add_argument("--site", type=Path, required=True)
    holding.add_argument("--keep", nargs="*", default=[])
    agreeing = commands.add_parser("agree")
    agreeing.add_argument("out", type=Path)
    writing = commands.add_parser("write")
    writing.add_argument("work", type=Path)
    writing.add_argument("out", type=Path)
    writing.add_argument("--python", required=True)
    writing.add_argument("--machine", required=True)
    writing.add_argument("--cooldown", default="", help="the header line that says the cutoff (environment.cooldown)")
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            denied = prepare(args.envs, args.work, args.upgrade)
            for line in denied:
                print(line, file=sys.stderr)
            return 1 if denied else 0
        if args.command == "preferences":
            print("\n".join(preferences(args.locks)))
        elif args.command == "undecided":
            left = undecided(args.resolved, args.by)
            print("\n".join(left))
            return 1 if left else 0
        elif args.command == "same":
            if len(args.resolved) != len(args.python):
                parser.error("same: one resolution for each --python")
            for resolved, python in zip(args.resolved, args.python, strict=True):
                differ = differences(resolved, args.expected)
                if differ:
                    print(
                        f"lock: on Python {python} the .in files resolve to other packages than on {args.here} "
                        f"({', '.join(differ[:6])}{' ...' if len(differ) > 6 else ''}), and one lock serves every "
                        "Python tools/python.sh takes. HINT: pin the package that differs in the .in file, or take "
                        "that Python out of SUPPORTED_PYTHONS in tools/python.sh",
                        file=sys.stderr,
                    )
                    return 1
        elif args.command == "unheld":
            sys.stdout.write(unheld(args.requirements, args.site, args.keep))
        elif args.command == "agree":
            agree(args.out)
        else:
            write(args.work, args.out, args.python, args.machine, args.cooldown)
    except (OSError, LockError, InvalidRequirement) as error:
        print(f"lock: {error}", file=sys.stderr)
        return 2 if args.command == "prepare" else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
