"""The environment files derived from the lock: one conda YAML per stage, and the Dockerfile.

One source of truth for versions: envs/requirements.in -> tools/lock.sh -> envs/requirements.lock
-> everything else. Each stage's YAML pins the dependency closure of that stage's packages at
the lock's versions (written by ``write``, run by tools/lock.sh); a stage that imports torch has
one YAML per torch build (``environment.cuda``, snakeddp.environment.builds): <stage>.yaml for
PyPI's, <stage>-<label>.yaml for the others, the same pins but torch's build and its index. The
Dockerfile installs the lock itself, and its own version arguments (Python, torch, the default
build's index) are checked against it.

    python -m snakeddp.environment.files write    # regenerate envs/{data,train,report}.yaml from the lock
    python -m snakeddp.environment.files check    # every file agrees with the lock, or a list of what doesn't
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from packaging.utils import canonicalize_name

from snakeddp.environment.builds import BUILDS, DEFAULT, TorchBuild, torch_build
from snakeddp.environment.lock import ACCELERATED, Lock, LockError, Pin, installed, read_lock, requirement_closure
from snakeddp.environment.requirements import stage_additions
from snakeddp.errors import EnvFileError
from snakeddp.util import yamltext

ENVS = Path(__file__).resolve().parents[3] / "envs"
LOCK_NAME = "requirements.lock"
REQUIREMENTS_NAME = "requirements.in"
DOCKERFILE_NAME = "Dockerfile"
# What each stage's code imports (rules/*.smk say which stage a rule runs in); their
# dependencies come along from the packages' metadata. Every stage captures its environment,
# which needs packaging (snakeddp.environment.lock) and cyclonedx-bom (its bill of materials). The
# user's own packages join the stages their envs/requirements.in line names (`# stages: train`,
# written by tools/add.sh).
STAGE_PACKAGES: Mapping[str, tuple[str, ...]] = {
    "data": (
        "numpy",
        "safetensors",
        "blake3",
        "pyyaml",
        "jsonschema",
        "packaging",
        "cyclonedx-bom",
        "pandas",
        "pyarrow",
        "pillow",
    ),
    "train": (
        "torch",
        "lightning",
        "numpy",
        "safetensors",
        "blake3",
        "pyyaml",
        "jsonschema",
        "psutil",
        "packaging",
        "cyclonedx-bom",
    ),
    "report": ("matplotlib", "rocrate", "jinja2", "pyyaml", "jsonschema", "packaging", "cyclonedx-bom"),
}
REQUIRE_HASHES = "--require-hashes"
HINT = (
    "HINT: run tools/lock.sh (it rewrites the locks and the YAMLs from envs/*.in); "
    "tools/add.sh NAME==VERSION changes one version."
)
# Packages a Dockerfile may pin although the lock leaves them out: the installer.
_UNLOCKED_TOOLS = frozenset({"pip"})
_DOCKER_PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^\s\"';&|)]*)")
_ARG_REFERENCE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def stage_roots(stage: str, envs: Path = ENVS) -> tuple[str, ...]:
    """The packages a stage imports: snakeddp's own needs, then the user's (envs/requirements.in)."""
    return STAGE_PACKAGES[stage] + stage_additions(envs / REQUIREMENTS_NAME)[stage]


def stage_builds(stage: str) -> list[TorchBuild]:
    """The torch builds a stage has a YAML for: every build when the stage imports torch, else the default."""
    return list(BUILDS.values()) if ACCELERATED in STAGE_PACKAGES[stage] else [BUILDS[DEFAULT]]


def stage_file(stage: str, cuda: str = DEFAULT) -> str:
    """The file name under envs/ of a stage's conda YAML for ``environment.cuda``."""
    build = torch_build(cuda)
    if build.label is None or ACCELERATED not in STAGE_PACKAGES[stage]:
        return f"{stage}.yaml"
    return f"{stage}-{build.label}.yaml"


def build_lock(build: TorchBuild, envs: Path = ENVS) -> Lock | None:
    """A torch build's own lock (envs/requirements-torch-<cuda>.lock): torch with that build's hashes and the
    runtime wheels it adds; None where the build could not be locked (the file says why)."""
    path = envs / f"requirements-torch-{build.cuda}.lock"
    lock = read_lock(path) if path.is_file() else Lock()
    return lock if ACCELERATED in lock.pins else None


def locked_build(cuda: str, envs: Path = ENVS) -> Lock:
    """The lock of the torch build ``environment.cuda`` names; an EnvFileError (one line, a HINT) where it has no
    hashes, which every installer of that build (set-up, conda env, image, AzureML) then refuses."""
    build = torch_build(cuda)
    own = build_lock(build, envs)
    if own is None:
        path = envs / f"requirements-torch-{build.cuda}.lock"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        said = [line[2:].strip() for line in text.splitlines() if line.startswith("# Not locked:")]
        why = said[0].removeprefix("Not locked: ").split(". Every installer")[0] if said else "the file is missing"
        ready = [f'"{name}"' for name, other in BUILDS.items() if name != build.cuda and build_lock(other, envs)]
        choose = f"choose a build this checkout has locked (environment.cuda: {' or '.join(ready)})" if ready else ""
        raise EnvFileError(
            f'environment.cuda "{build.cuda}": {path} has no hashes for torch\'s build from {build.index_url} '
            f"({why}), "
            "and nothing installs without them. HINT: run tools/lock.sh on a machine that reaches "
            f"{build.index_url} and commit the locks{', or ' + choose if choose else ''}."
        )
    return own


def stage_pins(
    stage: str, lock: Lock, strict: bool = True, envs: Path = ENVS, sites: Sequence[str] | None = None
) -> list[Pin]:
    """Every package the stage needs, as the lock pins it (version and hashes).

    The closure is read from the installed packages' metadata (in ``sites``, the first that holds a package;
    default the interpreter's site-packages), so ``strict`` (for writing the YAMLs) requires every package of
    the lock installed there at its version (tools/lock.sh's, or the project venv); checks read it from
    whatever is installed, since which packages a package requires rarely changes with its version.
    """
    present = installed(sites)
    stale = [
        f"{pin.name} (lock {pin.version}, installed {present[key].version if key in present else 'none'})"
        for key, pin in lock.pins.items()
        if key not in present or present[key].version.split("+")[0] != pin.version.split("+")[0]
    ]
    if strict and stale:
        raise EnvFileError(
            f"{', '.join(sites) if sites else sys.prefix} is not installed from the lock, so the stage closures "
            "cannot be read from it: "
            f"{', '.join(stale[:5])}{' ...' if len(stale) > 5 else ''}. HINT: run tools/setup.sh first."
        )
    names = requirement_closure(stage_roots(stage, envs), present, sites) & set(lock.pins)
    return sorted((lock.pins[key] for key in names), key=lambda pin: pin.name.lower())


def stage_requirements(
    stage: str, lock: Lock, envs: Path, build: TorchBuild, strict: bool = True, sites: Sequence[str] | None = None
) -> list[Pin]:
    """The pins of a stage's YAML for one torch build: the lock's, torch as the build's lock has it (the
    version with the build's label, unhashed where the build is not locked) and the wheels the build adds."""
    closure = stage_pins(stage, lock, strict=strict, envs=envs, sites=sites)
    if ACCELERATED not in {canonicalize_name(pin.name) for pin in closure}:
        return closure
    own = build_lock(build, envs)
    torch = lock.pins[ACCELERATED]
    pins = [pin for pin in closure if canonicalize_name(pin.name) != ACCELERATED]
    if own is not None and own.pins[ACCELERATED].version.split("+")[0] != torch.version:
        own = None  # the build's lock is of another torch than the core's: stale, as check() then says
    if own is None:
        return sorted([*pins, Pin(torch.name, build.torch_pin(torch.version).partition("==")[2])], key=_by_name)
    return sorted([*pins, *own.pins.values()], key=_by_name)


def _by_name(pin: Pin) -> str:
    return pin.name.lower()


# libyaml's emitter, where PyYAML was built with it: the same bytes as the pure-Python SafeDumper, which took 0.36 s
# of CPU of the 0.78 s that writing the six YAMLs took (every tools/lock.sh and tools/add.sh).
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render_stage(
    stage: str, lock: Lock, envs: Path = ENVS, build: TorchBuild = BUILDS[DEFAULT], sites: Sequence[str] | None = None
) -> str:
    """The conda YAML of one stage and torch build: conda-forge's Python, then pip pins from the locks, hashed."""
    pins = stage_requirements(stage, lock, envs, build, sites=sites)
    document = {
        "channels": ["conda-forge", "nodefaults"],
        "dependencies": [
            f"python={lock.python}",
            "pip",
            {"pip": [*build.pip_options(), REQUIRE_HASHES, *(pin.requirement() for pin in pins)]},
        ],
    }
    header = (
        f"# Conda environment of the {stage} stage (snakemake --sdm conda): {', '.join(stage_roots(stage, envs))}\n"
        f"# and their dependencies, at the versions of envs/requirements.lock, each with the sha256 of its files\n"
        f"# (pip refuses any other file: --require-hashes).\n"
        f"# Generated by tools/lock.sh (python -m snakeddp.environment.files write); do not edit by hand.\n"
    )
    if ACCELERATED in {canonicalize_name(pin.name) for pin in pins}:
        header += (
            f'# torch build: environment.cuda "{build.cuda}", from {build.index_url}: {build.serves}.\n'
            f"# One file per torch build: {', '.join(stage_file(stage, b.cuda) for b in BUILDS.values())}.\n"
        )
        if build_lock(build, envs) is None:
            header += (
                f"# Not installable: envs/requirements-torch-{build.cuda}.lock has no hashes for this build (it says "
                "why), so pip refuses torch here. HINT: run tools/lock.sh where its index answers.\n"
            )
    return header + yaml.dump(document, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=1 << 16)


def write(envs: Path = ENVS, sites: Sequence[str] | None = None) -> list[Path]:
    """Rewrite every stage's YAML (one per torch build where the stage imports torch) from the lock in ``envs``,
    the closures read from the metadata in ``sites`` (default: the interpreter's site-packages)."""
    lock = read_lock(envs / LOCK_NAME)
    written = []
    for stage in STAGE_PACKAGES:
        for build in stage_builds(stage):
            path = envs / stage_file(stage, build.cuda)
            path.write_text(render_stage(stage, lock, envs, build, sites), encoding="utf-8")
            written.append(path)
    return written


def _yaml_pins(document: Any, path: Path) -> tuple[str | None, dict[str, Pin], list[str], list[str]]:
    """The python spec, the pip pins (canonical name -> pin, hashes too), the pip options and the format problems."""
    problems: list[str] = []
    options: list[str] = []
    python = None
    pins: dict[str, Pin] = {}
    dependencies = document.get("dependencies") if isinstance(document, dict) else None
    if not isinstance(dependencies, list):
        return None, pins, options, [f"{path}: no `dependencies:` list"]
    for item in dependencies:
        if isinstance(item, str) and item.startswith("python"):
            python = item.removeprefix("python").lstrip("=")
        elif isinstance(item, dict) and "pip" in item:
            for line in item["pip"] or []:
                found = re.fullmatch(
                    r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)", str(line).strip()
                )
                if found:
                    hashes = tuple(sorted(h.removeprefix("--hash=sha256:") for h in found[3].split()))
                    pins[canonicalize_name(found[1])] = Pin(found[1], found[2], hashes)
                elif str(line).startswith("--"):
                    options.append(str(line).strip())
                else:
                    problems.append(f"{path}: pip entry {line!r} is not an exact pin (name==version, sha256 hashes)")
        elif isinstance(item, str) and item != "pip":
            problems.append(
                f"{path}: conda package {item!r}: only python and pip come from conda; pin the rest in the lock"
            )
    return python, pins, options, problems


def check_stage(
    stage: str, path: Path, lock: Lock, envs: Path = ENVS, build: TorchBuild = BUILDS[DEFAULT]
) -> list[str]:
    """What in one stage's YAML for one torch build disagrees with the locks (empty when it agrees)."""
    if not path.is_file():
        return [f"{path}: missing (the {stage} stage's conda env). {HINT}"]
    python, pins, options, problems = _yaml_pins(yamltext.safe_load(path.read_text(encoding="utf-8")), path)
    if python != lock.python:
        problems.append(f"{path}: python={python}, but the lock is for Python {lock.python}")
    if options != [*build.pip_options(), REQUIRE_HASHES]:
        want = ", ".join([*build.pip_options(), REQUIRE_HASHES])
        problems.append(
            f"{path}: pip options {', '.join(options) or 'none'}, but torch build {build.cuda} needs {want}"
        )
    expected = {canonicalize_name(pin.name): pin for pin in stage_requirements(stage, lock, envs, build, strict=False)}
    own = build_lock(build, envs)
    for key, pin in sorted(pins.items()):
        want = expected.get(key) or lock.pins.get(key) or (own.pins.get(key) if own else None)
        if want is None:
            problems.append(f"{path}: {pin.name}=={pin.version} is not in the lock")
        elif pin.version != want.version:
            problems.append(f"{path}: {pin.name}=={pin.version}, but the lock has {pin.name}=={want.version}")
        elif pin.hashes != want.hashes:
            problems.append(f"{path}: {pin.name}=={pin.version}'s hashes are not the lock's")
    missing = sorted(expected[key].name for key in set(expected) - set(pins))
    surplus = sorted(pins[key].name for key in set(pins) - set(expected) if key in lock.pins)
    if missing:
        problems.append(f"{path}: lacks {', '.join(missing)}, which the {stage} stage needs")
    if surplus:
        problems.append(f"{path}: pins {', '.join(surplus)}, which the {stage} stage does not need")
    return problems


def _dockerfile_args(structure: list[dict[str, Any]]) -> dict[str, str]:
    args: dict[str, str] = {}
    for instruction in structure:
        if instruction["instruction"] == "ARG" and "=" in instruction["value"]:
            name, _, default = instruction["value"].partition("=")
            args[name.strip()] = default.strip().strip("\"'")
    return args


def _copy_sources(value: str) -> list[str]:
    """The source paths of a COPY/ADD (everything but its options and its destination)."""
    paths = [token for token in value.split() if not token.startswith("--")]
    return paths[:-1]


def check_dockerfile(path: Path, lock: Lock) -> list[str]:
    """What in the Dockerfile disagrees with the lock: its Python and torch arguments, any
    ``name==version`` it installs, and whether it installs the lock at all."""
    from dockerfile_parse import DockerfileParser  # a test and lint tool (requirements-dev)

    if not path.is_file():
        return [f"{path}: missing"]
    structure = DockerfileParser(path=str(path)).structure
    args = _dockerfile_args(structure)
    problems = []
    python = args.get("PYTHON_VERSION")
    if python != lock.python:
        problems.append(f"{path}: ARG PYTHON_VERSION={python}, but the lock is for Python {lock.python}")
    torch = args.get("TORCH_VERSION")
    if torch != lock.version(ACCELERATED):
        problems.append(f"{path}: ARG TORCH_VERSION={torch}, but the lock has torch=={lock.version(ACCELERATED)}")
    # build_image passes another index for other builds; without one the image is the default build.
    index = args.get("TORCH_INDEX_URL")
    if index != BUILDS[DEFAULT].index_url:
        problems.append(
            f"{path}: ARG TORCH_INDEX_URL={index}, but the default torch build ({DEFAULT}) comes from "
            f"{BUILDS[DEFAULT].index_url}; other builds are chosen with environment.cuda"
        )
    copies_lock = any(
        i["instruction"] in {"COPY", "ADD"} and f"envs/{LOCK_NAME}" in _copy_sources(i["value"]) for i in structure
    )
    if not copies_lock:
        problems.append(f"{path}: never copies envs/{LOCK_NAME} into the image, so it cannot install it")
    for instruction in structure:
        if instruction["instruction"] != "RUN":
            continue
        where = f"{path}:{instruction['startline'] + 1}"
        command = _ARG_REFERENCE.sub(lambda m: args.get(m[1] or m[2], m[0]), instruction["value"])
        for name, version in _DOCKER_PIN.findall(command):
            locked = lock.version(name)
            if locked is None and canonicalize_name(name) not in _UNLOCKED_TOOLS:
                problems.append(f"{where}: installs {name}=={version}, which is not in the lock")
            elif locked is not None and version != locked:
                problems.append(f"{where}: installs {name}=={version}, but the lock has {name}=={locked}")
    return problems


def check(envs: Path = ENVS) -> list[str]:
    """Every disagreement between the lock and the stage YAMLs and Dockerfile in ``envs``."""
    lock = read_lock(envs / LOCK_NAME)
    problems = []
    for stage in STAGE_PACKAGES:
        for build in stage_builds(stage):
            problems += check_stage(stage, envs / stage_file(stage, build.cuda), lock, envs, build)
    return problems + check_dockerfile(envs / DOCKERFILE_NAME, lock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.environment.files", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["write", "check"])
    parser.add_argument("--envs", type=Path, default=ENVS, help="the envs/ directory (default: this checkout's)")
    parser.add_argument(
        "--site",
        dest="sites",
        action="append",
        help="write: a directory whose packages' metadata the closures are read from, the first that holds a "
        "package counting (repeatable; default: this interpreter's site-packages)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            for path in write(args.envs, args.sites):
                print(f"envfiles: wrote {path}")
            return 0
        problems = check(args.envs)
    except (OSError, LockError, EnvFileError) as error:
        print(f"envfiles: {error}", file=sys.stderr)
        return 2
    if problems:
        print("\n".join(problems) + f"\n{HINT}", file=sys.stderr)
        return 1
    print(f"envfiles: {args.envs} agrees with {LOCK_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
