"""The files of a user's module and of the user's own modules it imports, found without importing anything.

A model's layers are often built in another file of its package (``mypkg/layers.py``), or its base class is: an
edit there changes the weights' shapes as surely as one in the target's own file, so the attempt key covers them.
"The user's own" is a module found on sys.path outside the interpreter's standard library and installed packages
(an editable install's source folder counts as the user's); an installed package's version is in the environment
record already. The imports are read from each file's syntax (``import x``, ``from .y import z``), at any depth,
so a module imported at run time only (``importlib.import_module(name)``) is not followed.
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
from pathlib import Path

from snakeddp.util.userfiles import is_users

# Enough for any model's own package; a walk past it (a module on sys.path that imports a tree of its own) stops.
MOST_FILES = 500


def _top_spec(top: str) -> importlib.machinery.ModuleSpec | None:
    """Top-level module ``top`` as sys.path finds it, importing nothing; None for a built-in or missing one."""
    if top in sys.builtin_module_names:
        return None
    try:
        return importlib.machinery.PathFinder.find_spec(top)
    except (ImportError, ValueError):
        return None


def _top_is_users(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether a top-level module's ``spec`` is the user's: its file, or a namespace package's every folder."""
    if spec.origin and Path(spec.origin).is_file():
        return is_users(Path(spec.origin))
    folders = [Path(location) for location in spec.submodule_search_locations or ()]
    return bool(folders) and all(is_users(folder) for folder in folders)


def locate(name: str) -> Path | None:
    """The file of module ``name`` (``a.b`` → ``a/b.py`` or ``a/b/__init__.py``) as sys.path finds it, importing
    nothing (importlib.util.find_spec imports a dotted name's parents); None for a built-in or missing module, or a
    namespace package's folder."""
    top, *rest = name.split(".")
    spec = _top_spec(top)
    return None if spec is None else _below(spec, rest)


def _below(spec: importlib.machinery.ModuleSpec, rest: list[str]) -> Path | None:
    """The file of the module ``rest`` names under the top-level module ``spec`` finds (itself where empty)."""
    if not rest:
        return Path(spec.origin) if spec.origin and Path(spec.origin).is_file() else None
    folders = [Path(location) for location in spec.submodule_search_locations or ()]
    for part in rest[:-1]:
        folders = [folder / part for folder in folders if (folder / part).is_dir()]
    for folder in folders:
        for candidate in (folder / f"{rest[-1]}.py", folder / rest[-1] / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _imported(path: Path, name: str) -> list[str]:
    """The module names ``path`` (module ``name``) imports, as written; relative ones made absolute."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []  # the import of the module itself says what is wrong with it
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                anchor = parts[: len(parts) - (node.level - 1)] if node.level - 1 <= len(parts) else []
                base = ".".join([*anchor, *([base] if base else [])])
            if base:
                names.append(base)
                # `from pkg import sub` may name a module as well as a name in pkg.
                names += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return names


def user_files(module: str) -> dict[str, Path]:
    """``module`` and every module of the user's it imports, at any depth: {module name: file}, the named module
    first; empty when ``module`` itself is not found. A name whose top-level module is installed is never
    looked into further (``lightning.pytorch``)."""
    found: dict[str, Path] = {}
    queue, seen = [module], set()
    while queue and len(found) < MOST_FILES:
        name = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        top, *rest = name.split(".")
        spec = _top_spec(top)  # once a name: whose it is, and where its file is
        if spec is None or (name != module and not _top_is_users(spec)):
            continue
        path = _below(spec, rest)
        if path is None or (name != module and not is_users(path)):
            continue
        found[name] = path
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        parents = name.split(".")[:-1]
        queue += [".".join(parents[:depth]) for depth in range(1, len(parents) + 1)]
        queue += _imported(path, name)
    return found
