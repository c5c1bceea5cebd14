"""The venv's bytecode, compiled by tools/setup.sh for what its installs changed, and snakeddp's own (src/).

Where PYTHONDONTWRITEBYTECODE=1 is set (CI machines, containers; this project's VMs) no import writes a .pyc, so
a package without one is compiled from source by every process that imports it. uv's ``--compile-bytecode``
compiles a new venv well, but after every later install it looks at every module of site-packages again (35,000
files in the core venv: 0.5 s of CPU however little changed, twice in each set-up that installs: the sync, then
torch's build). The distributions an install changed are found instead by their metadata directory, which uv
makes anew for each distribution it installs (its name, inode and change time, kept in ``--record`` after each
run): only their modules are compiled, each as uv compiles it (``compileall.compile_file``, quietly, warnings
ignored: a wheel may ship a module that never compiles). With no record (a new venv, or one set up before this
record existed), every module of site-packages is compiled, as uv did, on every core. An install cut short
before this ran leaves its distributions out of the record, so the next set-up compiles them.

    python -m snakeddp.environment.bytecode --record .venv/.snakeddp-compiled [--sources src] [--site DIR]

``--sources``: directories compiled as ``python -m compileall -q`` does (an error is printed and fails the
run): snakeddp's own modules, found through the editable install's path entry.
"""

from __future__ import annotations

import argparse
import compileall
import csv
import os
import sys
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from snakeddp.environment.lock import site_packages
from snakeddp.util.fsutil import atomic_write_text

# Fewer modules than this are compiled in this process; more, on every core (a package of a thousand modules
# took 0.9 s in one process).
_POOL_FROM = 300


def installed_keys(sites: Iterable[str]) -> dict[str, Path]:
    """Each distribution's metadata directory in ``sites`` by its key (``NAME-VERSION.dist-info INODE CTIME_NS``):
    a distribution installed again has a new directory, so a new key, even at the same version."""
    keys = {}
    for site in sites:
        if not os.path.isdir(site):
            continue
        with os.scandir(site) as entries:
            for entry in entries:
                if entry.name.endswith(".dist-info") and entry.is_dir():
                    found = entry.stat()
                    keys[f"{entry.name} {found.st_ino} {found.st_ctime_ns}"] = Path(entry.path)
    return keys


def record_modules(info: Path) -> list[str]:
    """The modules a distribution's RECORD lists inside its site-packages directory (not its scripts)."""
    site = info.parent
    try:
        with open(info / "RECORD", newline="", encoding="utf-8") as record:
            rows = list(csv.reader(record))
    except OSError:
        return []
    return [str(site / row[0]) for row in rows if row and row[0].endswith(".py") and not row[0].startswith("..")]


def all_modules(sites: Iterable[str]) -> list[str]:
    """Every module under ``sites``, as uv's --compile-bytecode found them."""
    return [
        os.path.join(top, name)
        for site in sites
        for top, _, names in os.walk(site)
        for name in names
        if name.endswith(".py")
    ]


def _quietly() -> None:
    warnings.filterwarnings("ignore")


def _compile(path: str) -> None:
    compileall.compile_file(path, quiet=2)


def compile_modules(paths: list[str], workers: int | None = None) -> None:
    """Compile ``paths`` where their bytecode is missing or stale, as uv does: errors and warnings unsaid."""
    workers = workers if workers is not None else len(os.sched_getaffinity(0))
    if len(paths) < _POOL_FROM or workers < 2:
        with warnings.catch_warnings():
            _quietly()
            for path in paths:
                _compile(path)
        return
    with ProcessPoolExecutor(max_workers=workers, initializer=_quietly) as pool:
        for _ in pool.map(_compile, paths, chunksize=max(16, len(paths) // (workers * 8))):
            pass


def compile_changed(record: Path, sites: list[str]) -> int:
    """Compile the modules of every distribution in ``sites`` not in ``record`` (all of ``sites`` without one),
    then write the record; how many distributions were new to it."""
    keys = installed_keys(sites)
    before = set(record.read_text(encoding="utf-8").splitlines()) if record.is_file() else None
    if before is None:
        compile_modules(all_modules(sites))
        new = list(keys)
    else:
        new = [key for key in keys if key not in before]
        compile_modules([path for key in new for path in record_modules(keys[key])])
    atomic_write_text(record, "".join(f"{key}\n" for key in sorted(keys)))
    return len(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.environment.bytecode", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--record", type=Path, required=True, help="the distributions compiled before (written)")
    parser.add_argument("--sources", type=Path, nargs="*", default=[], help="directories compiled as compileall -q")
    parser.add_argument("--site", dest="sites", action="append", help="default: this interpreter's site-packages")
    args = parser.parse_args(argv)
    compile_changed(args.record, args.sites or site_packages())
    return 0 if all(compileall.compile_dir(str(path), quiet=1) for path in args.sources) else 1


if __name__ == "__main__":
    sys.exit(main())
