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

Compiling is most of a new venv's set-up (about 16 s of CPU of the core lock), and each new checkout or worktree
compiles the same files again. With ``--store`` (tools/setup.sh: ``bytecode/`` beside its uv, under
``~/.cache/snakeddp``), a distribution's bytecode is kept once compiled, under its ``.dist-info`` name and its
modules' sha256s in its RECORD (the same key, the same sources), and a later venv gets it as
hard links (a copy across file systems). Only bytecode that fits its source as installed is taken (the header's
mtime and size; uv links the same files from its cache, so they match): any other module is compiled as before,
and a store that cannot be read or written only costs the compiling. ``rm -rf`` it to take back its space.

    python -m snakeddp.environment.bytecode --record .venv/.snakeddp-compiled [--store DIR] [--sources src] [--site DIR]

``--sources``: directories compiled as ``python -m compileall -q`` does (an error is printed and fails the
run): snakeddp's own modules, found through the editable install's path entry.
"""

from __future__ import annotations

import argparse
import compileall
import csv
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
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


def _module_rows(info: Path) -> list[list[str]]:
    """The rows of a distribution's RECORD for its modules inside site-packages (not its scripts): path, hash, size."""
    try:
        with open(info / "RECORD", newline="", encoding="utf-8") as record:
            rows = list(csv.reader(record))
    except OSError:
        return []
    return [row for row in rows if row and row[0].endswith(".py") and not row[0].startswith("..")]


def record_modules(info: Path, rows: list[list[str]]) -> list[str]:
    """The modules a distribution's RECORD lists inside its site-packages directory (not its scripts), from its
    module rows (``_module_rows``)."""
    return [str(info.parent / row[0]) for row in rows]


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


def fits(pyc: str, source: os.stat_result) -> bool:
    """Whether ``pyc`` is bytecode this Python takes for ``source`` as it stands: its magic number, and the
    source's mtime and size in its header (or a hash-based pyc, which checks its source itself)."""
    try:
        with open(pyc, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") & 1:
        return True
    mtime, size = int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")
    return mtime == int(source.st_mtime) & 0xFFFFFFFF and size == source.st_size & 0xFFFFFFFF


def _link(source: str, target: str) -> None:
    """``target`` made a hard link to ``source`` (a copy across file systems), replacing whatever was there."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = f"{target}.{os.getpid()}.part"
    try:
        os.link(source, partial)
    except OSError:
        shutil.copyfile(source, partial)
    os.replace(partial, target)


class Store:
    """Compiled distributions kept for the next venv: ``ROOT/CACHE_TAG/NAME-VERSION.dist-info-MODULESSHA/``
    holds each module's pyc at its path in site-packages. An entry is complete or absent (renamed into place)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / sys.implementation.cache_tag

    def entry(self, info: Path, rows: list[list[str]]) -> Path | None:
        """Where the distribution's bytecode is kept: by the paths and sha256s its RECORD gives its modules (``rows``,
        not the whole RECORD: a console script's hash differs with each venv's path); None where one has no hash."""
        if not rows or any(len(row) < 2 or not row[1] for row in rows):
            return None
        digest = hashlib.sha256("\n".join(sorted(f"{row[0]},{row[1]}" for row in rows)).encode()).hexdigest()
        return self.root / f"{info.name}-{digest[:24]}"

    @staticmethod
    def restore(entry: Path | None, site: Path, modules: list[str]) -> set[str]:
        """The ``modules`` (in ``site``) whose bytecode was taken from ``entry`` (linked into place)."""
        taken: set[str] = set()
        if entry is None or not entry.is_dir():
            return taken
        for module in modules:
            pyc = importlib.util.cache_from_source(module)
            kept = entry / os.path.relpath(pyc, site)
            try:
                if fits(str(kept), os.stat(module)):
                    _link(str(kept), pyc)
                    taken.add(module)
            except OSError:
                continue
        return taken

    def keep(self, entry: Path | None, site: Path, modules: list[str], taken: set[str]) -> None:
        """The bytecode compiled for ``modules`` (in ``site``) kept as the distribution's ``entry``, where it has
        none, or one whose bytecode ``restore`` could not take (``taken``: none of it; the sources' mtimes changed,
        as after ``uv cache clean``)."""
        if entry is None or (entry.exists() and (taken or not modules)):
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            building = Path(tempfile.mkdtemp(prefix=".part-", dir=self.root))
        except OSError:
            return
        try:
            for module in modules:
                pyc = importlib.util.cache_from_source(module)
                if os.path.isfile(pyc) and fits(pyc, os.stat(module)):
                    _link(pyc, str(building / os.path.relpath(pyc, site)))
            if entry.exists():  # stale: set aside, then removed, so that no reader sees it half gone
                stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=self.root))
                os.rename(entry, stale / "entry")
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(building, entry)  # another set-up's, made meanwhile, is as good: this one is dropped
        except OSError:
            shutil.rmtree(building, ignore_errors=True)


def compile_changed(record: Path, sites: list[str], store: Path | None = None) -> int:
    """Compile the modules of every distribution in ``sites`` not in ``record`` (all of ``sites`` without one),
    taking what ``store`` kept and keeping what was compiled there, then write the record; how many
    distributions were new to it."""
    keys = installed_keys(sites)
    before = set(record.read_text(encoding="utf-8").splitlines()) if record.is_file() else None
    new = list(keys) if before is None else [key for key in keys if key not in before]
    rows = {key: _module_rows(keys[key]) for key in new}  # each RECORD read once
    modules = {key: record_modules(keys[key], rows[key]) for key in new}
    kept = Store(store) if store is not None else None
    entries = {key: kept.entry(keys[key], rows[key]) if kept else None for key in new}
    taken = {key: Store.restore(entries[key], keys[key].parent, modules[key]) for key in new}
    every_taken = set().union(*taken.values())
    wanted = all_modules(sites) if before is None else [path for key in new for path in modules[key]]
    compile_modules([path for path in wanted if path not in every_taken])
    if kept:
        for key in new:
            kept.keep(entries[key], keys[key].parent, modules[key], taken[key])
    atomic_write_text(record, "".join(f"{key}\n" for key in sorted(keys)))
    return len(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.environment.bytecode", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--record", type=Path, required=True, help="the distributions compiled before (written)")
    parser.add_argument("--store", type=Path, help="where compiled distributions are kept for later venvs")
    parser.add_argument("--sources", type=Path, nargs="*", default=[], help="directories compiled as compileall -q")
    parser.add_argument("--site", dest="sites", action="append", help="default: this interpreter's site-packages")
    args = parser.parse_args(argv)
    compile_changed(args.record, args.sites or site_packages(), args.store)
    return 0 if all(compileall.compile_dir(str(path), quiet=1) for path in args.sources) else 1


if __name__ == "__main__":
    sys.exit(main())
