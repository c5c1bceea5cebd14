"""The torch build tools/setup.sh installs into .venv: the one ``environment.cuda`` names (``--cuda``, else
config/config.yaml's), of the lock's torch version, as conda envs, the GPU image and AzureML get it.

    python -m snakeddp.environment.venv_build --lock envs/requirements.lock [--cuda 12.6]

prints one line, ``<cuda> <pin> <index> <build lock>``: ``13.0 torch==2.13.0 - envs/requirements-torch-13.0.lock``
(PyPI's own wheel: the lock as it is) or ``12.6 torch==2.13.0+cu126 https://download.pytorch.org/whl/cu126 ...``.
An unknown build, or one whose lock has no hashes, is one line with a HINT, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from snakeddp.config import ConfigError, load
from snakeddp.environment.builds import BUILDS, torch_build
from snakeddp.environment.files import locked_build
from snakeddp.environment.lock import read_lock
from snakeddp.errors import EnvFileError


def chosen(cuda: str | None, config: Path) -> str:
    """``--cuda``, else environment.cuda of ``config`` (the schema's default when the file has none)."""
    return cuda if cuda else str(load(config)["environment"]["cuda"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.environment.venv_build", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--cuda", help=f"a build environment.cuda names: {', '.join(BUILDS)}")
    parser.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    args = parser.parse_args(argv)
    try:
        build = torch_build(chosen(args.cuda, args.config))
        version = read_lock(args.lock).version("torch")
        locked_build(build.cuda, args.lock.parent)
    except (ConfigError, EnvFileError) as error:
        print(f"setup: {error}", file=sys.stderr)
        return 2
    index = "-" if build.label is None else build.index_url
    print(build.cuda, build.torch_pin(version), index, args.lock.parent / f"requirements-torch-{build.cuda}.lock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
