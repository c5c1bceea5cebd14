"""Classes named in config by import path, ``"package.module:ClassName"``, and built from config kwargs.

Users bring their own LightningModule (``model.target``) and LightningDataModule (``data.module``)
this way. Every failure (the module does not import, the name is missing, it is the wrong kind of
class, its constructor raises) becomes one ``TargetError`` that names the config key, the target
and the cause, with the original exception chained for the full traceback.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import os
import pkgutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from snakeddp.errors import TargetError, add_hint
from snakeddp.util.hashing import sha256_file
from snakeddp.util.userfiles import where_raised

IMPORTABLE_HINT = (
    "HINT: the class must be importable in the training environment: install its package there, or put "
    "the module in the directory snakemake runs from (every rank starts with `python -m`, which puts that "
    "directory on sys.path)."
)


def split_target(target: str, key: str) -> tuple[str, str]:
    module, sep, qualname = target.partition(":")
    if not (sep and module and qualname):
        raise TargetError(
            f"{key}={target!r} is not an import path. HINT: write it as 'package.module:ClassName', "
            "e.g. 'examples.tabular.model:TabularNet'."
        )
    return module, qualname


def load_class(target: str, key: str, base: type | str) -> type:
    """The class ``target`` names, checked to be a subclass of ``base``: a class, or its ``module:Name``, which is
    not imported for the check (a class that subclasses it has imported its module; where that is not imported,
    nothing ``target`` imported can be one)."""
    module_name, qualname = split_target(target, key)
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise TargetError(import_failure(key, target, module_name, exc)) from exc
    for part in qualname.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            close = difflib.get_close_matches(part, [name for name in dir(found) if not name.startswith("_")], n=1)
            fix = f"did you mean '{close[0]}'?" if close else "check the class name after the colon."
            raise TargetError(
                f"{key}={target!r}: module '{module_name}' ({getattr(found, '__file__', '?')}) has no attribute "
                f"'{qualname}'. HINT: {fix}"
            ) from None
    if isinstance(base, str):
        base_module, _, base_name = base.partition(":")
        shown, name = f"{base_module}.{base_name}", base_name.rpartition(".")[2]
        loaded = sys.modules.get(base_module)
        base = getattr(loaded, base_name) if loaded is not None else None
    else:
        shown, name = f"{base.__module__}.{base.__qualname__}", base.__name__
    if not (inspect.isclass(found) and base is not None and issubclass(found, base)):
        raise TargetError(
            f"{key}={target!r}: {found!r} is not a subclass of {shown}. HINT: point {key} at a {name} class."
        )
    return found


# Import names whose package is called otherwise on the index, for tools/add.sh.
PACKAGE_OF = {
    "sklearn": "scikit-learn", "skimage": "scikit-image", "cv2": "opencv-python-headless", "PIL": "pillow",
    "yaml": "pyyaml", "bs4": "beautifulsoup4", "dateutil": "python-dateutil", "google.protobuf": "protobuf",
}  # fmt: skip


def import_failure(key: str, target: str, module_name: str, error: Exception) -> str:
    """Why ``module_name`` did not import, and what to do: the module is not found (IMPORTABLE_HINT); a module it
    imports is not installed (the command that installs it to stay); or its code failed (where)."""
    said = f"{key}={target!r}: cannot import module '{module_name}' ({type(error).__name__}: {error})"
    missing = error.name if isinstance(error, ModuleNotFoundError) else None
    if missing is not None and not (module_name == missing or module_name.startswith(f"{missing}.")):
        top = missing.partition(".")[0]
        package = PACKAGE_OF.get(missing, PACKAGE_OF.get(top, top))
        return (
            f"{key}={target!r}: module '{module_name}' imports '{missing}', which is not installed in the training "
            f"environment. {add_hint(package, 'train')} (the package that provides '{top}': its name on PyPI may "
            "differ)."
        )
    if missing is None:
        place = where_raised(error)
        if place is not None:
            return f"{said}. HINT: the module's own code failed at {place}: fix it there, then rerun."
    close = _close_module(missing) if missing is not None else None
    if close is not None:
        meant = f"{close}{module_name.removeprefix(missing)}:{target.partition(':')[2]}"
        return f"{said}. HINT: did you mean {meant!r}? (a module of that name is there)"
    return f"{said}. {IMPORTABLE_HINT}"


def _close_module(missing: str) -> str | None:
    """The module beside ``missing`` (in its package, or in the directory snakemake runs from) whose name is closest
    to its last part: a typo's module is there, where the not-found HINT sent the user to put it. Not an installed
    one: 'mynet' is no typo of the standard library's netrc."""
    parent, _, name = missing.rpartition(".")
    try:
        where = list(importlib.import_module(parent).__path__) if parent else [os.getcwd()]
    except (ImportError, AttributeError):  # the parent is missing too, or is no package: its own typo comes first
        return None
    names = {module.name for module in pkgutil.iter_modules(where)}
    # A folder of Python files without __init__.py imports too (a namespace package: byo/model.py), and
    # iter_modules skips it.
    for folder in where:
        with contextlib.suppress(OSError):
            names.update(
                p.name for p in Path(folder).iterdir() if p.name.isidentifier() and p.is_dir() and any(p.glob("*.py"))
            )
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f"{parent}.{close[0]}" if close and parent else (close[0] if close else None)


def accepted_parameters(cls: type) -> set[str]:
    """Names the constructor takes as keywords (not ``**kwargs``, which may not accept arbitrary names)."""
    signature = inspect.signature(cls.__init__)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name for name, p in signature.parameters.items() if p.kind in kinds and name != "self"}


#: Where each class's constructor arguments are set.
KWARGS_KEYS = {"model.target": "model.kwargs", "data.module": "data.module_kwargs"}


def check_keywords(cls: type, names: Iterable[str], target: str, key: str) -> None:
    """A TargetError naming the first of ``names`` (the config's constructor arguments) that ``cls`` does not
    take: the workflow checks them before any job, where the train job's constructor would refuse them after
    the data stage and the queue. A constructor with ``**kwargs`` may take any name: not checked."""
    names = list(names)
    parameters = inspect.signature(cls.__init__).parameters.values()
    _check_required(parameters, names, target, key)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = accepted_parameters(cls)
    unknown = [name for name in names if name not in accepted]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(accepted), n=1)
        fix = f"did you mean {close[0]!r}?" if close else f"remove it, or give {cls.__name__} that parameter."
        raise TargetError(
            f"{KWARGS_KEYS[key]}.{unknown[0]}: {key}={target!r} takes no {unknown[0]!r} (its constructor takes "
            f"{', '.join(sorted(accepted)) or 'nothing'}). HINT: {fix}"
        )


# The constructor arguments snakeddp gives each key's class when it names them (the data's task; the loader's).
SUPPLIED = {"model.target": ("num_features", "num_classes"), "data.module": ("manifest_path", "batch_size", "seed")}


def _check_required(parameters: Iterable[inspect.Parameter], names: list[str], target: str, key: str) -> None:
    """A TargetError naming the constructor's parameters without a default that neither the config nor snakeddp
    gives: the train job's constructor refused them, after the data stage, with a HINT to check the config."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    missing = [
        p.name
        for p in parameters
        if p.kind in kinds and p.default is p.empty and p.name != "self"
        if p.name not in names and p.name not in SUPPLIED[key]
    ]
    if missing:
        given = " or ".join(SUPPLIED[key])
        raise TargetError(
            f"{KWARGS_KEYS[key]}: {key}={target!r} needs {', '.join(map(repr, missing))}, which the config does not "
            f"give. HINT: set {KWARGS_KEYS[key]}.{missing[0]}, or, where it is the data's own value, name the "
            f"parameter {given}: snakeddp passes those."
        )


def construct(cls: type, kwargs: Mapping[str, Any], target: str, key: str) -> Any:
    """``cls(**kwargs)``, with any failure reported as a TargetError naming the target."""
    try:
        return cls(**kwargs)
    except Exception as exc:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        place = where_raised(exc)
        fix = (
            "check the keyword arguments in the config against the class's constructor."
            if place is None  # the call itself: an argument the constructor does not take, or a missing one
            else f"the constructor's code failed at {place}: fix it there, then rerun."
        )
        raise TargetError(
            f"{key}={target!r}: {cls.__name__}({shown}) failed: {type(exc).__name__}: {exc}. HINT: {fix}"
        ) from exc


def source_record(role: str, obj: object) -> dict[str, Any]:
    """Where the class of a user's object came from, for provenance: its module file and sha256."""
    cls = type(obj)
    path = inspect.getsourcefile(cls)
    shown = path
    if path:
        with contextlib.suppress(ValueError):
            shown = str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    return {
        "role": role,
        "target": f"{cls.__module__}:{cls.__qualname__}",
        "file": shown,
        "sha256": sha256_file(path) if path else None,
    }


def user_code(cfg: Mapping[str, Any], model: object, datamodule: object) -> list[dict[str, Any]]:
    """Provenance of the user's classes a run trained with (model.target, data.module), if any."""
    used = (("model", cfg["model"].get("target"), model), ("datamodule", cfg["data"].get("module"), datamodule))
    return [source_record(role, obj) for role, target, obj in used if target]


# The Lightning class each key's class extends, as "module:Name" (compared by name: nothing is imported for it).
BASES = {
    "model.target": "lightning.pytorch.core.module:LightningModule",
    "data.module": "lightning.pytorch.core.datamodule:LightningDataModule",
}


def defining_files(cfg: Mapping[str, Any]) -> dict[Path, str]:
    """Each file that defines a configured class (model.target, data.module) or one of its bases below Lightning's,
    with its key: an installed package's class (Lightning's own demos) is the code the run chose, and an error
    raised in it is explained as such. Only classes imported already: it explains a failure, and imports nothing."""
    files: dict[Path, str] = {}
    for key, target in (("model.target", cfg["model"].get("target")), ("data.module", cfg["data"].get("module"))):
        module_name, _, qualname = str(target or "").partition(":")
        found: Any = sys.modules.get(module_name)
        for part in qualname.split(".") if found is not None else ():
            found = getattr(found, part, None)
        for cls in found.__mro__ if inspect.isclass(found) else ():
            if f"{cls.__module__}:{cls.__qualname__}" == BASES[key]:
                break
            with contextlib.suppress(TypeError, OSError):
                files.setdefault(Path(inspect.getfile(cls)).resolve(), key)
    return files


def main(argv: list[str]) -> int:
    """``python -m snakeddp.config.targets KEY TARGET NAMES [KEY TARGET NAMES ...]``: import each configured
    class as training will and check its kind, and that its constructor takes NAMES (its config arguments,
    comma-separated). The workflow runs this with the training interpreter before any job
    (snakeddp.workflow.preflight); a failure is one line on stderr. Lightning is imported by the classes that
    need it, not first: a module that does not import, or a class that is not Lightning's, is refused in a
    fraction of a second instead of after Lightning's import (4-5 s of CPU)."""
    try:
        for key, target, names in zip(argv[::3], argv[1::3], argv[2::3], strict=True):
            cls = load_class(target, key, BASES[key])
            check_keywords(cls, filter(None, names.split(",")), target, key)
    except TargetError as error:
        print(" ".join(str(error).split()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
