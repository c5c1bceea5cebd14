"""Build and tag the GPU image (envs/Dockerfile) with whichever container engine is usable.

Used by the workflow's optional ``build_image`` rule (``snakemake build_image``). It never
pushes: pushing needs the user's registry credentials, so that stays a command they run.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from snakeddp import __version__
from snakeddp.environment.builds import DEFAULT, torch_build
from snakeddp.environment.files import locked_build
from snakeddp.environment.lock import ACCELERATED, read_lock
from snakeddp.errors import ImageBuildError
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.hashing import sha256_file

ENGINES = ("docker", "podman")
IMAGE_NAME = "snakeddp"
#: What ``build_image`` writes (the workflow's rule output; the report's crate carries it when it is there).
RECORD = "results/envs/image.json"


def default_tag(lock_path: str | Path, cuda: str = DEFAULT) -> str:
    """``snakeddp:<snakeddp version>-torch<torch version>[-<build>]``: what the image holds, readable
    (PyPI's default build has no suffix, so the tags of images built before the choice still hold)."""
    build = torch_build(cuda)
    suffix = f"-{build.label}" if build.label else ""
    return f"{IMAGE_NAME}:{__version__}-torch{read_lock(lock_path).version(ACCELERATED)}{suffix}"


def image_tag(image: str | None, lock_path: str | Path, cuda: str = DEFAULT) -> str:
    """The tag to build: the configured image reference without its ``docker://`` scheme, or the
    default one. A reference that is not a Docker name (a .sif file, a digest) cannot be a tag."""
    if not image:
        return default_tag(lock_path, cuda)
    tag = image.removeprefix("docker://")
    if "://" in tag or "@" in tag or tag.endswith(".sif"):
        raise ImageBuildError(
            f"environment.image={image!r} is not a name an image can be tagged with. "
            "HINT: set environment.image to docker://REGISTRY/snakeddp:TAG (or null for the default tag) "
            "to build, then point it at the pushed digest."
        )
    return tag


def find_engine(engines: Sequence[str] = ENGINES) -> str:
    """The first of ``engines`` that is installed and answers ``info``; a clear error otherwise."""
    reasons = []
    for name in engines:
        path = shutil.which(name)
        if path is None:
            reasons.append(f"{name}: not installed")
            continue
        try:
            done = subprocess.run([path, "info"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            reasons.append(f"{name}: `{name} info` failed ({error})")
            continue
        if done.returncode == 0:
            return path
        said = (done.stderr or done.stdout).strip().splitlines()
        reasons.append(f"{name}: installed, but `{name} info` fails: {said[-1] if said else f'exit {done.returncode}'}")
    raise ImageBuildError(
        "No container engine can build the image here:\n  "
        + "\n  ".join(reasons)
        + "\nHINT: start the Docker daemon or install podman, or build on a machine that has one "
        "(docker build -f envs/Dockerfile -t TAG .), push it and set environment.image. "
        "Nothing else in the workflow needs an engine."
    )


def build_command(
    engine: str, dockerfile: Path, context: Path, tag: str, lock_sha256: str, cuda: str = DEFAULT
) -> list[str]:
    build = torch_build(cuda)
    # The Dockerfile's own default is PyPI's build; only another build needs its index and its lock passed.
    index = (
        ["--build-arg", f"TORCH_INDEX_URL={build.index_url}", "--build-arg", f"TORCH_BUILD={build.cuda}"]
        if build.label
        else []
    )
    return [
        engine,
        "build",
        "--file",
        str(dockerfile),
        "--tag",
        tag,
        *index,
        "--label",
        f"io.snakeddp.lock-sha256={lock_sha256}",
        "--label",
        f"io.snakeddp.torch-build={build.cuda}",
        str(context),
    ]


def _inspect(engine: str, tag: str) -> dict[str, Any]:
    done = subprocess.run(
        [engine, "image", "inspect", "--format", "{{json .}}", tag],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    details = json.loads(done.stdout)
    return {
        "id": details.get("Id"),
        "repo_digests": details.get("RepoDigests") or [],
        "created": details.get("Created"),
    }


def build(
    context: str | Path,
    record_path: str | Path,
    image: str | None = None,
    log: IO[str] | None = None,
    engines: Sequence[str] = ENGINES,
    cuda: str = DEFAULT,
) -> dict[str, Any]:
    """Build envs/Dockerfile of the repository at ``context``, tag it, and record what was built."""
    context = Path(context)
    dockerfile = context / "envs" / "Dockerfile"
    lock = context / "envs" / "requirements.lock"
    tag = image_tag(image, lock, cuda)
    locked_build(cuda, context / "envs")
    engine = find_engine(engines)
    command = build_command(engine, dockerfile, context, tag, sha256_file(lock), cuda)
    if log is not None:
        print(f"build_image: {shlex.join(command)}", file=log, flush=True)
    started = time.time()
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT if log is not None else None, check=False)
    if done.returncode != 0:
        raise ImageBuildError(
            f"`{shlex.join(command)}` failed with exit code {done.returncode}; its output is in the log."
        )
    record = {
        "engine": Path(engine).name,
        "tag": tag,
        "torch_build": cuda,
        "command": shlex.join(command),
        "dockerfile_sha256": sha256_file(dockerfile),
        "lock_sha256": sha256_file(lock),
        "seconds": round(time.time() - started, 1),
        **_inspect(engine, tag),
    }
    atomic_write_json(record_path, record)
    return record
