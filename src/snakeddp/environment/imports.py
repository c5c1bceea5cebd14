"""The set-up's last check: import what the stages import, and name the package that breaks it.

A package can install cleanly and still break an import elsewhere: PyPI's CUDA-built torchvision
beside the CPU torch raises `operator torchvision::nms does not exist` from inside
`import lightning.pytorch` (through torchmetrics). The error names neither the package nor that it
was just added, so the failure is traced to the distribution whose module was executing when the
import failed (the innermost module-level frame of the traceback), and told in one line.

    python -m snakeddp.environment.imports [--config config/config.yaml] [--requirements envs/requirements.in]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import sys
import traceback
from pathlib import Path
from types import TracebackType

from packaging.utils import canonicalize_name

from snakeddp.config.lightningcli import CLASS_PATH, import_path
from snakeddp.environment.requirements import stage_additions
from snakeddp.util import shutdown, yamltext

# What the stages' processes import first: Lightning (and torch under it), then snakeddp's own
# entry points (rules/*.smk run `python -m snakeddp.steps|launch|cli`, and launch starts snakeddp.train).
STAGE_MODULES = ("torch", "lightning.pytorch", "snakeddp.steps", "snakeddp.launch", "snakeddp.train", "snakeddp.cli")


def config_modules(path: Path) -> list[str]:
    """The modules of model.target and data.module in a config file, when it sets them (either spelling:
    LightningCLI's class_path names them too)."""
    if not path.is_file():
        return []
    config = yamltext.safe_load(path.read_text(encoding="utf-8")) or {}
    model, data = config.get("model") or {}, config.get("data") or {}
    targets = [model.get("target") or model.get(CLASS_PATH), data.get("module") or data.get(CLASS_PATH)]
    paths = [import_path(target) for target in targets if isinstance(target, str)]
    return [path.partition(":")[0] for path in paths if ":" in path]


def package_modules(requirements: Path) -> list[str]:
    """The top-level modules of the packages the user added (every ``# stages:`` line)."""
    names = {name for stage in stage_additions(requirements).values() for name in stage}
    by_distribution: dict[str, list[str]] = {}
    for module, distributions in importlib.metadata.packages_distributions().items():
        for distribution in distributions:
            by_distribution.setdefault(canonicalize_name(distribution), []).append(module)
    # A name is read from the wheel's top_level.txt, which can list what was never installed: azure-identity
    # 1.27.0's says `images`, azure-ai-ml 1.35.2's `local`. Only a name that finds a module is imported.
    return sorted(
        {
            module
            for name in names
            for module in by_distribution.get(name, [])
            if module.isidentifier() and module != "_" and _findable(module)
        }
    )


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _owners() -> dict[Path, importlib.metadata.Distribution]:
    """Every installed file -> the distribution whose RECORD lists it (only read when an import failed)."""
    owners = {}
    for distribution in importlib.metadata.distributions():
        for file in distribution.files or ():
            owners.setdefault(Path(distribution.locate_file(file)).resolve(), distribution)
    return owners


def culprit(tb: TracebackType | None) -> tuple[str, str | None, list[str]]:
    """Where module-level code was running when the import failed (``package NAME VERSION``, or the
    file when no distribution owns it), that package's name, and the packages the import went
    through to reach it (outermost first)."""
    owners = _owners()
    chain: list[tuple[str, str | None]] = []
    for frame in traceback.extract_tb(tb):
        if frame.name != "<module>" or "importlib" in Path(frame.filename).parts[-2:]:
            continue
        distribution = owners.get(Path(frame.filename).resolve())
        if distribution is None:
            place = (f"{frame.filename}", None)
        else:
            place = (f"package {distribution.metadata['Name']} {distribution.version}", distribution.metadata["Name"])
        if not chain or chain[-1] != place:
            chain.append(place)
    if not chain:
        return "", None, []
    return chain[-1][0], chain[-1][1], [label.removeprefix("package ") for label, _ in chain[:-1]]


def check(modules: list[str]) -> str | None:
    """None when every module imports; otherwise the one line that says which failed and why."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:
            cause = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
            place, package, via = culprit(error.__traceback__)
            where = f" in {place}" + (f" (reached through {', '.join(via)})" if via else "") if place else ""
            if package is None:
                hint = "HINT: fix the module the error names (python -c 'import MODULE' shows the whole traceback)."
            else:
                hint = (
                    f"HINT: remove it with tools/add.sh --remove {package}, "
                    f"or pin a version that works here with tools/add.sh {package}==VERSION."
                )
            return f"import {module} fails{where}: {cause}. {hint}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.environment.imports", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/config.yaml"), help="model.target, data.module")
    parser.add_argument("--requirements", type=Path, default=Path("envs/requirements.in"), help="the user's packages")
    args = parser.parse_args(argv)
    # The modules a config names are found where snakemake runs from, as the ranks find them.
    sys.path.insert(0, str(Path.cwd()))
    modules = [*STAGE_MODULES, *package_modules(args.requirements), *config_modules(args.config)]
    # As the stages' entry points import them: no collections during the imports, none over them at exit
    # (6.0 -> 4.0 s of CPU here, 3 alternating rounds: in every set-up that installs, every tools/add.sh).
    shutdown.pause_collection()
    problem = check(modules)
    shutdown.freeze_imports()
    if problem:
        print(f"setup: {problem}", file=sys.stderr)
        return 1
    print(f"setup: imports work: {', '.join(modules)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
