"""A cooldown on new releases: tools/lock.sh resolves as if nothing uploaded after a cutoff existed (uv's
``--exclude-newer``), so a release is taken only once it has been public for envs/cooldown.toml's days, and a
release pinned inside the cooldown is refused in one line of ours instead of uv's resolver output.

    python -m snakeddp.environment.cooldown uv-args              # --exclude-newer ... for uv pip compile
    python -m snakeddp.environment.cooldown header               # the locks' header line that says the cutoff
    python -m snakeddp.environment.cooldown explain UV_LOG...    # a refusal uv's log holds, as one line

Only the standard library: tools/lock.sh runs it before any venv of the new locks exists.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from snakeddp.errors import LockError

COOLDOWN = Path(__file__).resolve().parents[3] / "envs" / "cooldown.toml"
# uv 0.13's hint for a pin the cutoff filtered out.
_FILTERED = re.compile(
    r"`(?P<name>[^`]+)` was filtered by `exclude-newer` to only include packages uploaded before (?P<cutoff>\S+)\. "
    r"The requested version, v(?P<version>\S+), was published at (?P<published>[0-9TZ:.-]+)"
)


@dataclass(frozen=True)
class Wait:
    """How many days a release must have been public; for one package, why it differs."""

    days: int
    reason: str = ""


@dataclass(frozen=True)
class Cooldown:
    default: Wait
    #: Canonical-ish (lower-case) package name -> its own wait.
    packages: dict[str, Wait]

    def cutoff(self, wait: Wait, today: datetime) -> datetime:
        """UTC midnight ``wait.days`` before ``today``: the same cutoff all day, so a re-lock writes the same bytes."""
        midnight = today.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=wait.days)

    def uv_args(self, today: datetime) -> list[str]:
        args = ["--exclude-newer", _stamp(self.cutoff(self.default, today))]
        for name, wait in sorted(self.packages.items()):
            args += ["--exclude-newer-package", f"{name}={_stamp(self.cutoff(wait, today))}"]
        return args

    def header(self, today: datetime) -> str:
        own = "".join(f"; {name}: {wait.days} days ({wait.reason})" for name, wait in sorted(self.packages.items()))
        return (
            f"# No release uploaded after {_stamp(self.cutoff(self.default, today))} "
            f"(a {self.default.days}-day cooldown, envs/cooldown.toml{own})."
        )


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _days(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LockError(f"{where}: days = {value!r} is not a whole number of days. HINT: write days = 7")
    return value


def load(path: Path = COOLDOWN) -> Cooldown:
    """envs/cooldown.toml; a package entry without a reason is refused, so every exception says why."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise LockError(f"{path}: {error}. HINT: restore it with git checkout {path}") from None
    packages = {}
    for number, entry in enumerate(data.get("package", []), 1):
        name, reason = str(entry.get("name", "")).strip().lower(), str(entry.get("reason", "")).strip()
        if not name or not reason:
            raise LockError(
                f"{path}: package entry {number} needs a name and the reason for its own wait. "
                'HINT: name = "example", days = 0, reason = "why it cannot wait"'
            )
        packages[name] = Wait(_days(entry.get("days"), f"{path}: {name}"), reason)
    return Cooldown(Wait(_days(data.get("days", 7), str(path))), packages)


def explain(logs: Iterable[Path], cooldown: Cooldown, where: str) -> list[str]:
    """One line for each pin uv refused because its release is younger than the cutoff."""
    lines = []
    for log in logs:
        text = " ".join(log.read_text(encoding="utf-8").split()) if log.is_file() else ""
        for found in _FILTERED.finditer(text):
            name, version = found["name"], found["version"]
            wait = cooldown.packages.get(name.lower(), cooldown.default)
            published = found["published"][:16].replace("T", " ")
            lines.append(
                f"{where}: {name} {version} was published {published} UTC, inside the {wait.days}-day cooldown on new "
                f"releases (envs/cooldown.toml: nothing uploaded after {found['cutoff'][:10]}). HINT: take the newest "
                f"release outside it (tools/add.sh {name}), or give {name} a wait of its own in envs/cooldown.toml, "
                "with the reason beside it"
            )
    return sorted(set(lines))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.environment.cooldown", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", type=Path, default=COOLDOWN)
    parser.add_argument("--where", default="lock")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("uv-args")
    commands.add_parser("header")
    explaining = commands.add_parser("explain")
    explaining.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        cooldown = load(args.config)
    except LockError as error:
        print(f"{args.where}: {error}", file=sys.stderr)
        return 2
    today = datetime.now(UTC)
    if args.command == "uv-args":
        print("\n".join(cooldown.uv_args(today)))
    elif args.command == "header":
        print(cooldown.header(today))
    else:
        lines = explain(args.logs, cooldown, args.where)
        for line in lines:
            print(line, file=sys.stderr)
        return 1 if lines else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
