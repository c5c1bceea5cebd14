"""Known-bad releases, refused before anything installs: envs/denied.toml (a package, the versions an
advisory names, the first release it calls fixed), the releases an index marks yanked (PEP 592, as uv
reports them while it resolves), and, where one answers, an advisory service (pip-audit against PyPI's
or OSV's database); where none answers, one line says that check did not run.

    python -m snakeddp.environment.advisories check envs/*.lock envs/*.yaml [--pyproject PATH] [--yanked UV_LOG...]
    python -m snakeddp.environment.advisories requirement lightning==2.6.5   # tools/add.sh, before it edits
    python -m snakeddp.environment.advisories constraints                    # what uv may never resolve
    python -m snakeddp.environment.advisories audit envs/*.lock              # pip-audit, where it answers

Only packaging and the standard library: tools/lock.sh runs it before any venv of the new locks exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from snakeddp.environment.lock import entries, read_lock
from snakeddp.errors import LockError

DENIED = Path(__file__).resolve().parents[3] / "envs" / "denied.toml"
# uv's words for a yanked release it resolved (uv 0.13: `warning: `attrs==21.1.0` is yanked (reason: "...")`).
_YANKED = re.compile(
    r"`(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^`]+)` is yanked(?: \(reason: \"(?P<reason>.*)\"\))?"
)
# A pip line of a stage's conda YAML: `  - lightning==2.6.6 --hash=sha256:...`.
_YAML_PIN = re.compile(r"^\s*-\s+(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s#]+)", re.MULTILINE)
# The advisory services pip-audit asks, in order; the first that answers for every package is used.
SERVICES = {"pypi": "PyPI's JSON API", "osv": "OSV"}
AUDIT_TIMEOUT_S = 120
# One release asked first, the way pip-audit asks it: a service that cannot answer it is not asked about every
# release (pip-audit spends seconds per lock finding that out, package by package, on a network without it).
PROBE_TIMEOUT_S = 10
# Where pip-audit asks each service about a release (pip_audit/_service/pypi.py and osv.py).
PYPI_RELEASE = "https://pypi.org/pypi/{name}/{version}/json"
# A site's OSV mirror (SNAKEDDP_OSV_URL; pip-audit's --osv-url) where osv.dev is out of reach.
OSV_QUERY = os.environ.get("SNAKEDDP_OSV_URL") or "https://api.osv.dev/v1/query"
# Set, the audit fails (exit 3) where no advisory service answered, for a CI that reaches one; unset it says so in
# one line and passes: the deny list and the index's yanks were still checked, and a lint that no offline machine
# (this project's own CI among them) could pass would be switched off, not heeded.
REQUIRED = "SNAKEDDP_ADVISORIES_REQUIRED"
NOT_RUN = "advisories: the advisory check did not run: "


@dataclass(frozen=True)
class Denial:
    """One advisory's releases of one package."""

    package: str
    versions: tuple[SpecifierSet, ...]
    advisory: str
    fixed: str
    summary: str = ""
    aliases: tuple[str, ...] = ()

    def denies(self, name: str, version: str) -> bool:
        if canonicalize_name(name) != canonicalize_name(self.package):
            return False
        try:
            parsed = Version(version)
        except InvalidVersion:
            return False
        return any(spec.contains(parsed, prereleases=True) for spec in self.versions)

    @property
    def named(self) -> str:
        return self.advisory + (f" ({', '.join(self.aliases)})" if self.aliases else "")


def load(path: Path = DENIED) -> list[Denial]:
    """The deny list; a LockError naming the entry that is not one."""
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise LockError(f"{path}: cannot read the deny list ({error}). HINT: fix the file's TOML.") from None
    denials = []
    for index, entry in enumerate(document.get("release", []), start=1):
        try:
            denial = Denial(
                package=str(entry["package"]),
                versions=tuple(SpecifierSet(spec) for spec in entry["versions"]),
                advisory=str(entry["advisory"]),
                fixed=str(Version(str(entry["fixed"]))),
                summary=str(entry.get("summary", "")),
                aliases=tuple(entry.get("aliases", ())),
            )
        except (KeyError, TypeError, InvalidSpecifier, InvalidVersion) as error:
            raise LockError(
                f"{path}: release {index} is not a deny entry ({type(error).__name__}: {error}). HINT: each "
                "[[release]] has package, versions (PEP 440 specifiers), advisory and fixed (a version)."
            ) from None
        denials.append(denial)
    return denials


def first_allowed(name: str, denials: Sequence[Denial], start: str) -> str:
    """The first version at or after the fixes of the advisories that deny ``start`` which no entry denies."""
    candidate = start
    for _ in range(len(denials) + 1):
        matching = [d for d in denials if d.denies(name, candidate)]
        if not matching:
            return candidate
        candidate = str(max(Version(d.fixed) for d in matching))
    return candidate


def refusal(name: str, version: str, denials: Sequence[Denial], where: str) -> str | None:
    """One line refusing ``name==version`` (its advisories, the first good version, the command), or None."""
    matching = [d for d in denials if d.denies(name, version)]
    if not matching:
        return None
    good = first_allowed(name, denials, version)
    said = "; ".join(f"{d.named}: {d.summary}, fixed in {d.fixed}" if d.summary else d.named for d in matching)
    return (
        f"{where}: {name} {version} is denied by envs/denied.toml ({said}); the first good version is {good}. "
        f"HINT: tools/add.sh {name}=={good}"
    )


def check_pins(pins: Iterable[tuple[str, str]], denials: Sequence[Denial], where: str) -> list[str]:
    return [line for name, version in pins if (line := refusal(name, version.split("+")[0], denials, where))]


def pins_of(path: Path) -> list[tuple[str, str]]:
    """(name, version) of every exact pin of a lock, or of a stage's conda YAML (its pip lines, as
    snakeddp.environment.files writes them: read without a YAML parser, which tools/setup.sh may not have)."""
    if path.suffix in (".yaml", ".yml"):
        return [(match["name"], match["version"]) for match in _YAML_PIN.finditer(path.read_text(encoding="utf-8"))]
    return [(pin.name, pin.version) for pin in read_lock(path).pins.values()]


def refuse_denied(paths: Sequence[Path], denied: Path = DENIED) -> None:
    """A LockError, one line per denied release that ``paths`` (locks, stage YAMLs) pin, naming its advisory and
    the files that pin it; nothing where none is denied. For the workflow, before --sdm conda makes any env."""
    denials = load(denied)
    pinned: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        for name, version in pins_of(path):
            pinned.setdefault((name, version.split("+")[0]), []).append(str(path))
    problems = [
        line for (name, version), where in pinned.items() if (line := refusal(name, version, denials, ", ".join(where)))
    ]
    if problems:
        raise LockError("\n".join(problems))


def check_requirements(requirements: Sequence[str], files: Sequence[Path], denials: Sequence[Denial]) -> list[str]:
    """One line for each exact pin, among ``requirements`` (tools/add.sh's) and the lines of ``files`` (.in
    files), that ``denials`` refuse."""
    problems = []
    for where, text in [("add", r) for r in requirements] + [
        (str(path), line) for path in files for _, line in entries(path.read_text(encoding="utf-8"))
    ]:
        requirement = Requirement(text.split("#")[0].strip())
        pinned = [(requirement.name, s.version) for s in requirement.specifier if s.operator == "=="]
        problems += check_pins(pinned, denials, where)
    return problems


def _floor_excludes(specifier: SpecifierSet, below: Version, inclusive: bool) -> bool:
    """Whether ``specifier`` admits nothing below ``below`` (or at it, ``inclusive``): a floor at or above it."""
    for clause in specifier:
        bound = Version(clause.version.rstrip(".*")) if clause.operator != "===" else None
        if bound is None:
            continue
        if clause.operator in (">=", "~=", "==") and (bound > below or (bound == below and not inclusive)):
            return True
        if clause.operator == ">" and bound >= below:
            return True
    return False


def check_ranges(pyproject: Path, denials: Sequence[Denial]) -> list[str]:
    """What in pyproject.toml's dependencies and extras admits a denied release."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = [
        *project.get("dependencies", []),
        *(r for group in project.get("optional-dependencies", {}).values() for r in group),
    ]
    problems = []
    for text in lines:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        for denial in denials:
            if canonicalize_name(requirement.name) != canonicalize_name(denial.package):
                continue
            for spec in denial.versions:
                for clause in spec:
                    bound = Version(clause.version)
                    if clause.operator == "==":
                        admitted = requirement.specifier.contains(bound, prereleases=True)
                    elif clause.operator in ("<", "<="):
                        admitted = not _floor_excludes(requirement.specifier, bound, clause.operator == "<=")
                    else:
                        admitted = False
                    if admitted:
                        problems.append(
                            f"{pyproject}: {text!r} admits {requirement.name}{clause} ({denial.named}). HINT: raise "
                            f"its floor to {first_allowed(requirement.name, denials, denial.fixed)} or exclude it (!=)."
                        )
    return problems


def constraints(denials: Sequence[Denial]) -> list[str]:
    """uv constraints that keep every denied release out of a resolution."""
    lines = []
    for denial in denials:
        for spec in denial.versions:
            for clause in spec:
                opposite = {"==": "!=", "<": ">=", "<=": ">", ">": "<=", ">=": "<", "!=": "=="}[clause.operator]
                lines.append(f"{denial.package}{opposite}{clause.version}")
    return sorted(set(lines))


def yanked(logs: Iterable[Path], where: str) -> list[str]:
    """One line per yanked release uv reported in ``logs`` (its stderr while resolving)."""
    seen: dict[tuple[str, str], str | None] = {}
    for log in logs:
        for match in _YANKED.finditer(log.read_text(encoding="utf-8") if log.is_file() else ""):
            seen.setdefault((match["name"], match["version"]), match["reason"])
    return [
        f"{where}: {name} {version} is yanked on its index (PEP 592{f': {reason}' if reason else ''}). HINT: pin "
        f"another release with tools/add.sh {name}==VERSION, or re-resolve with tools/lock.sh --upgrade"
        for (name, version), reason in sorted(seen.items())
    ]


def _unanswered(service: str, name: str, version: str) -> str | None:
    """Why ``service`` does not answer for one release (``name`` ``version``) as pip-audit would ask it, or None."""
    # S310: the URLs are the https constants above, or the site's OSV mirror (a test points them at a local server).
    if service == "pypi":
        request = urllib.request.Request(PYPI_RELEASE.format(name=name, version=version))  # noqa: S310
    else:
        query = {"package": {"name": name, "ecosystem": "PyPI"}, "version": version}
        body = json.dumps(query).encode()
        request = urllib.request.Request(OSV_QUERY, data=body, headers={"Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:  # noqa: S310
            answer = json.loads(response.read())
    except (OSError, ValueError) as error:  # refused, unresolved, timed out, an HTTP error, not JSON
        said = " ".join(str(getattr(error, "reason", None) or error).split())
        return f"{request.full_url} did not answer ({said[:120]})"
    # PyPI's answer lists a release's vulnerabilities (maybe none); OSV's is {} for a release it knows none of.
    if not isinstance(answer, dict) or (service == "pypi" and "vulnerabilities" not in answer):
        return f"{request.full_url} answered without advisories"
    return None


def _audit_with(service: str, requirements: Path) -> tuple[list[str], str | None]:
    """(vulnerabilities found, why the service did not answer for every package, or None)."""
    command = [
        sys.executable, "-m", "pip_audit", "--requirement", str(requirements), "--no-deps", "--disable-pip",
        "--vulnerability-service", service, "--format", "json", "--progress-spinner", "off",
        *(["--osv-url", OSV_QUERY] if service == "osv" else []),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=AUDIT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return [], f"no answer within {AUDIT_TIMEOUT_S} s"
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        said = " ".join(last.split())
        return [], said if len(said) <= 160 else said[:160] + "…"
    dependencies = report.get("dependencies", [])
    skipped = [d for d in dependencies if d.get("skip_reason")]
    found = [
        f"{d['name']} {d['version']}: {v['id']}{' (' + ', '.join(v['aliases']) + ')' if v.get('aliases') else ''}"
        f"{', fixed in ' + ', '.join(v['fix_versions']) if v.get('fix_versions') else ''}"
        for d in dependencies
        for v in d.get("vulns", [])
    ]
    if skipped:
        first = " ".join(str(skipped[0]["skip_reason"]).split())[:160]
        return found, f"{len(skipped)} of {len(dependencies)} packages not audited ({first})"
    return found, None


def audit(locks: Sequence[Path]) -> tuple[list[str], str]:
    """Ask the advisory services about every pin of ``locks``: (vulnerabilities, one line on what answered)."""
    try:
        import pip_audit  # noqa: F401  a dev tool (envs/requirements-dev.in)
    except ImportError:
        return [], (
            f"{NOT_RUN}pip-audit is not installed in this Python "
            f"({sys.prefix}; tools/setup.sh --dev installs it), so the locks were checked against envs/denied.toml "
            "and the index's yanks only."
        )
    # Each release once; a package two locks hold at two versions (the SDK v1's caps) goes in a second file.
    groups: list[dict[str, str]] = []
    for path in locks:
        for key, pin in read_lock(path).pins.items():
            version = pin.version.split("+")[0]
            group = next((g for g in groups if g.get(key, version) == version), None)
            if group is None:
                group = {}
                groups.append(group)
            group[key] = version
    count = sum(len(group) for group in groups)
    why = {}
    with tempfile.TemporaryDirectory() as work:
        files = []
        for index, group in enumerate(groups):
            files.append(Path(work) / f"pins-{index}.txt")
            # Names and versions only: hashes need not be checked to look advisories up.
            files[-1].write_text(
                "".join(f"{name}=={version}\n" for name, version in sorted(group.items())), encoding="utf-8"
            )
        first = next((sorted(group.items())[0] for group in groups if group), None)
        for service, label in SERVICES.items():
            found: list[str] = []
            failed = _unanswered(service, *first) if first else None
            if failed:
                why[label] = failed
                continue
            for requirements in files:
                more, failed_here = _audit_with(service, requirements)
                found += more
                failed = failed or failed_here
            if failed is None:
                return (
                    found,
                    f"advisories: {label} answered for all {count} releases: {len(found)} known vulnerabilities",
                )
            why[label] = failed
            if found:
                return found, f"advisories: {label} answered for some releases only ({failed})"
    said = "; ".join(f"{label}: {reason}" for label, reason in why.items())
    return [], (
        f"{NOT_RUN}no advisory service answered ({said}); the locks were "
        "checked against envs/denied.toml and the index's yanks only."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.environment.advisories", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser(
        "check", help="the locks or stage YAMLs (and pyproject.toml's ranges) against the deny list"
    )
    checking.add_argument("locks", nargs="*", type=Path)
    checking.add_argument("--pyproject", type=Path)
    checking.add_argument("--yanked", nargs="*", type=Path, default=[], help="uv's stderr while it resolved")
    checking.add_argument("--where", default="lock")
    asking = commands.add_parser(
        "requirement", help="NAME==VERSION pins (or .in files' pins), before anything is locked"
    )
    asking.add_argument("requirements", nargs="*")
    asking.add_argument("--file", nargs="*", type=Path, default=[], help="requirements files (.in)")
    commands.add_parser("constraints")
    auditing = commands.add_parser("audit")
    auditing.add_argument("locks", nargs="+", type=Path)
    for sub in (checking, asking, auditing, commands.choices["constraints"]):
        sub.add_argument("--denied", type=Path, default=DENIED)
    args = parser.parse_args(argv)
    try:
        denials = load(args.denied)
        if args.command == "constraints":
            print("\n".join(constraints(denials)))
            return 0
        if args.command == "requirement":
            problems = check_requirements(args.requirements, args.file, denials)
        elif args.command == "audit":
            problems, said = audit(args.locks)
            print(said)
            if said.startswith(NOT_RUN) and os.environ.get(REQUIRED):
                print(
                    f"advisories: {REQUIRED} is set, and no advisory service answered (above). HINT: let this machine "
                    "reach pypi.org or api.osv.dev (HTTPS_PROXY for a proxy), or point SNAKEDDP_OSV_URL at an OSV "
                    "mirror",
                    file=sys.stderr,
                )
                return 3
            problems = [f"advisories: {line}. HINT: tools/add.sh a fixed release" for line in problems]
        else:
            problems = yanked(args.yanked, args.where)
            for path in args.locks:
                problems += check_pins(pins_of(path), denials, str(path))
            if args.pyproject:
                problems += check_ranges(args.pyproject, denials)
    except (OSError, LockError, InvalidRequirement) as error:
        print(f"advisories: {error}", file=sys.stderr)
        return 2
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
