"""The lock, the per-stage conda YAMLs and the Dockerfile agree on every version."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.venvs import UV, uv_environment
from snakeddp.environment import files as envfiles
from snakeddp.environment.builds import BUILDS
from snakeddp.environment.lock import read_lock
from tests.helpers import REPO, subprocess_env

ENVS = REPO / "envs"
HADOLINT = Path(sys.executable).with_name("hadolint")


@pytest.fixture
def envs_copy(tmp_path: Path) -> Path:
    """The checked-in envs/ directory, copied so a test can break it."""
    return Path(shutil.copytree(ENVS, tmp_path / "envs"))


def test_the_checked_in_files_agree_with_the_lock():
    assert envfiles.check(ENVS) == []


@pytest.mark.parametrize("stage", envfiles.STAGE_PACKAGES)
def test_each_stage_yaml_is_what_the_lock_generates(stage):
    lock = read_lock(ENVS / "requirements.lock")
    for build in envfiles.stage_builds(stage):
        path = ENVS / envfiles.stage_file(stage, build.cuda)
        assert path.read_text() == envfiles.render_stage(stage, lock, build=build)


def pip_lines(path):
    return yaml.safe_load(path.read_text())["dependencies"][-1]["pip"]


@pytest.mark.parametrize(
    ("cuda", "name", "index", "torch"),
    [
        ("13.0", "train.yaml", None, "torch==2.13.0"),
        ("12.6", "train-cu126.yaml", "https://download.pytorch.org/whl/cu126", "torch==2.13.0+cu126"),
        ("13.2", "train-cu132.yaml", "https://download.pytorch.org/whl/cu132", "torch==2.13.0+cu132"),
        ("cpu", "train-cpu.yaml", "https://download.pytorch.org/whl/cpu", "torch==2.13.0+cpu"),
    ],
)
def test_the_train_stage_has_a_yaml_per_torch_build_differing_only_in_torch(cuda, name, index, torch):
    assert envfiles.stage_file("train", cuda) == name
    assert envfiles.stage_file("data", cuda) == "data.yaml", "a stage without torch has one env"
    lines = pip_lines(ENVS / name)
    options = [line for line in lines if line.startswith("--")]
    assert options == [*([f"--extra-index-url {index}"] if index else []), "--require-hashes"]
    own = envfiles.build_lock(BUILDS[cuda])
    (torch_line,) = [line for line in lines if line.split("==")[0] == "torch"]
    # A locked build's torch carries its hashes (pip requires them); one that could not be locked has none,
    # so pip refuses it, as the workflow does before any job.
    assert torch_line == (own.pins["torch"].requirement() if own else torch)
    added = set(own.pins) if own else set()
    default_added = set(envfiles.build_lock(BUILDS["13.0"]).pins)

    def shared(entries, skip):
        return [line for line in entries if not line.startswith("--") and line.split("==")[0] not in skip | {"torch"}]

    assert shared(lines, added) == shared(pip_lines(ENVS / "train.yaml"), default_added)


def test_every_pip_line_carries_the_locks_hashes_and_a_changed_one_is_caught(envs_copy):
    lock = read_lock(ENVS / "requirements.lock")
    data = pip_lines(ENVS / "data.yaml")
    numpy = lock.pins["numpy"]
    assert numpy.requirement() in data and len(numpy.hashes) > 1
    path = envs_copy / "data.yaml"
    path.write_text(path.read_text().replace(numpy.hashes[0], "0" * 64))
    assert envfiles.check(envs_copy) == [f"{path}: numpy=={numpy.version}'s hashes are not the lock's"]


def test_a_build_yaml_without_its_index_is_caught(envs_copy):
    legacy = envs_copy / "train-cu126.yaml"
    legacy.write_text(legacy.read_text().replace("  - --extra-index-url https://download.pytorch.org/whl/cu126\n", ""))
    assert envfiles.check(envs_copy) == [
        f"{legacy}: pip options --require-hashes, but torch build 12.6 needs --extra-index-url "
        "https://download.pytorch.org/whl/cu126, --require-hashes"
    ]


def test_a_build_yaml_with_the_default_torch_is_caught(envs_copy):
    legacy = envs_copy / "train-cu126.yaml"
    legacy.write_text(legacy.read_text().replace("torch==2.13.0+cu126", "torch==2.13.0"))
    assert envfiles.check(envs_copy) == [f"{legacy}: torch==2.13.0, but the lock has torch==2.13.0+cu126"]


def test_a_dockerfile_defaulting_to_another_build_is_caught(envs_copy):
    dockerfile = envs_copy / "Dockerfile"
    text = dockerfile.read_text().replace(f"ARG TORCH_INDEX_URL={BUILDS['13.0'].index_url}", "ARG TORCH_INDEX_URL=x")
    dockerfile.write_text(text)
    problems = envfiles.check(envs_copy)
    assert len(problems) == 1 and "ARG TORCH_INDEX_URL=x, but the default torch build (13.0)" in problems[0]


def test_stage_yamls_carry_only_what_the_stage_needs():
    def pins(stage):
        document = yaml.safe_load((ENVS / f"{stage}.yaml").read_text())
        return {line.split("==")[0].lower() for line in document["dependencies"][-1]["pip"]}

    data, train, report = pins("data"), pins("train"), pins("report")
    assert {"numpy", "safetensors", "blake3", "pyyaml", "jsonschema", "pandas", "pyarrow"} <= data  # pandas: tables
    assert not {"torch", "lightning", "matplotlib", "snakemake"} & data
    assert {"torch", "lightning", "torchmetrics", "numpy", "safetensors", "blake3"} <= train
    assert not {"pandas", "matplotlib", "rocrate", "snakemake"} & train
    assert {"matplotlib", "rocrate", "jinja2"} <= report
    assert not {"torch", "lightning", "pandas", "pyarrow"} & report  # the runs table is plain csv


def test_a_yaml_version_that_drifts_from_the_lock_is_caught(envs_copy):
    train = envs_copy / "train.yaml"
    train.write_text(train.read_text().replace("  - lightning==2.6.6", "  - lightning==2.6.5"))
    problems = envfiles.check(envs_copy)
    assert problems == [f"{train}: lightning==2.6.5, but the lock has lightning==2.6.6"]


def test_a_lock_change_the_yamls_and_dockerfile_did_not_follow_is_caught(envs_copy):
    lock = envs_copy / "requirements.lock"
    lock.write_text(lock.read_text().replace("torch==2.13.0", "torch==2.13.1").replace("numpy==2.4.6", "numpy==2.4.7"))
    problems = "\n".join(envfiles.check(envs_copy))
    assert "train.yaml: torch==2.13.0, but the lock has torch==2.13.1" in problems
    for stage in ("data", "train", "report"):
        assert f"{stage}.yaml: numpy==2.4.6, but the lock has numpy==2.4.7" in problems
    assert "Dockerfile: ARG TORCH_VERSION=2.13.0, but the lock has torch==2.13.1" in problems


def test_a_missing_or_needless_stage_package_is_caught(envs_copy):
    data = envs_copy / "data.yaml"
    lock = read_lock(ENVS / "requirements.lock")
    text = data.read_text().replace(f"  - {lock.pins['numpy'].requirement()}\n", "")
    text = text.replace("  - safetensors", f"  - {lock.pins['matplotlib'].requirement()}\n  - safetensors")
    data.write_text(text)
    problems = envfiles.check(envs_copy)
    assert f"{data}: lacks numpy, which the data stage needs" in problems
    assert f"{data}: pins matplotlib, which the data stage does not need" in problems


def test_a_yaml_for_another_python_is_caught(envs_copy):
    report = envs_copy / "report.yaml"
    report.write_text(report.read_text().replace("python=3.11", "python=3.12"))
    assert envfiles.check(envs_copy) == [f"{report}: python=3.12, but the lock is for Python 3.11"]


def test_dockerfile_pins_are_checked_against_the_lock(envs_copy):
    dockerfile = envs_copy / "Dockerfile"
    text = dockerfile.read_text()
    text = text.replace("ARG PYTHON_VERSION=3.11", "ARG PYTHON_VERSION=3.12")
    text += "ARG LIGHTNING=2.5.0\n"
    text += 'RUN python -m pip install --no-cache-dir "lightning==${LIGHTNING}" \\\n    rich==14.0.0\n'
    dockerfile.write_text(text)
    lines = len(text.splitlines())
    assert envfiles.check(envs_copy) == [
        f"{dockerfile}: ARG PYTHON_VERSION=3.12, but the lock is for Python 3.11",
        f"{dockerfile}:{lines - 1}: installs lightning==2.5.0, but the lock has lightning==2.6.6",
        f"{dockerfile}:{lines - 1}: installs rich==14.0.0, which is not in the lock",
    ]


def test_a_dockerfile_that_does_not_install_the_lock_is_caught(envs_copy):
    dockerfile = envs_copy / "Dockerfile"
    # Both stages' COPY (the deny check's and the one that installs).
    lines = dockerfile.read_text().splitlines(keepends=True)
    copies = [n for n, line in enumerate(lines) if line.startswith("COPY") and "envs/requirements.lock" in line]
    assert len(copies) == 2
    for n in copies:
        lines[n] = lines[n].replace("envs/requirements.lock", "envs/other.lock")
    dockerfile.write_text("".join(lines))
    assert envfiles.check(envs_copy) == [
        f"{dockerfile}: never copies envs/requirements.lock into the image, so it cannot install it"
    ]


def test_the_check_command_fails_on_a_disagreement(envs_copy):
    train = envs_copy / "train.yaml"
    train.write_text(train.read_text().replace("torch==2.13.0", "torch==2.12.0"))
    command = [sys.executable, "-m", "snakeddp.environment.files", "check", "--envs", str(envs_copy)]
    done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), check=False)
    assert done.returncode == 1
    assert "torch==2.12.0, but the lock has torch==2.13.0" in done.stderr and "HINT" in done.stderr


def test_the_dockerfile_passes_hadolint(tmp_path):
    done = subprocess.run([str(HADOLINT), str(ENVS / "Dockerfile")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    careless = tmp_path / "Dockerfile"
    careless.write_text((ENVS / "Dockerfile").read_text().replace("--no-install-recommends", ""))
    done = subprocess.run([str(HADOLINT), str(careless)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "DL3015" in done.stdout


def test_the_build_context_holds_what_the_dockerfile_copies():
    """.dockerignore keeps the context small (no .venv, no results) but must let these through."""
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {"envs/requirements.lock", "envs/requirements-torch-*.lock", "pyproject.toml", "README.md", "src"}
    assert "*" in ignore and copied <= allowed


def _stage_venv(tmp_path: Path, stage: str) -> Path:
    """A fresh venv holding only the stage YAML's pins (and snakeddp's source on PYTHONPATH). uv installs them,
    each file's hash checked as the YAML's --require-hashes asks, linked from its cache: pip took 10 s of CPU a
    stage unpacking the same wheels; which installer reads the list does not change what the pins hold."""
    venv = tmp_path / stage
    subprocess.run([UV, "venv", "--quiet", "--python", sys.executable, venv], check=True)
    document = yaml.safe_load((ENVS / f"{stage}.yaml").read_text())
    requirements = tmp_path / f"{stage}.txt"
    requirements.write_text("\n".join(document["dependencies"][-1]["pip"]) + "\n")
    install = [UV, "pip", "install", "--quiet", "--no-deps", "--python", venv / "bin" / "python", "-r", requirements]
    subprocess.run(install, check=True, timeout=600, env=uv_environment())
    return venv


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("stage", "modules"),
    [
        ("data", ["snakeddp.data.generate", "snakeddp.data.table"]),
        ("report", ["snakeddp.report.page", "snakeddp.report.figures", "snakeddp.report.crate", "snakeddp.cli"]),
    ],
)
def test_a_stage_env_built_from_its_yaml_runs_the_stage_code(tmp_path, stage, modules):
    """The pins suffice: the stage's modules import, and its environment is captured without torch."""
    venv = _stage_venv(tmp_path, stage)
    record = tmp_path / f"{stage}.json"
    code = (
        f"import importlib; [importlib.import_module(m) for m in {modules!r}]\n"
        "from snakeddp.environment.capture import capture\n"
        f"r = capture({stage!r}, {str(ENVS / 'requirements.lock')!r}, {str(record)!r})\n"
        "assert r['torch'] is None and 'torch' not in r['packages'], r['torch']\n"
    )
    done = subprocess.run(
        [venv / "bin" / "python", "-c", code], capture_output=True, text=True, env=subprocess_env(), check=False
    )
    assert done.returncode == 0, done.stderr
    assert record.is_file()
