"""Shared fixtures: the repository, subprocess environments, and throwaway workflow directories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


def make_run(root: Path, config: dict, run_id: str = "base") -> tuple[Path, Path]:
    """A dataset and a run.yaml under ``root/results`` as the workflow writes them: (run.yaml, manifest)."""
    from snakeddp import config as configuration
    from snakeddp.data import sources
    from snakeddp.data.generate import write_dataset_manifest, write_synthetic
    from snakeddp.run.runfile import RunFile

    resolved = configuration.validate(config)
    data = resolved["data"]
    dataset = configuration.dataset_id(data)
    params = sources.identity(data)
    directory = root / "results" / "data" / dataset
    train = []
    for index in range(data["num_train_files"]):
        part = directory / "train" / f"part-{index:05d}"
        write_synthetic(params, "train", index, part.with_suffix(".safetensors"), part.with_suffix(".json"))
        train.append(part.with_suffix(".json"))
    write_synthetic(params, "val", 0, directory / "val.safetensors", directory / "val.json")
    manifest = directory / f"manifest-{data['num_train_files']}.json"
    write_dataset_manifest(manifest, dataset, params, train, directory / "val.json")
    run_yaml = root / "results" / "runs" / run_id / "run.yaml"
    RunFile(run_id=run_id, config=configuration.run_config(resolved)).write(run_yaml)
    return run_yaml, manifest


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for processes the tests start: this checkout's package, one thread each."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    # OpenMPI refuses to run as root unless told it may (the test machines run as root).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra)
    return env


def assert_valid_provenance(directory: Path, require: bool = True) -> list[dict]:
    """Validate every provenance.json under ``directory`` against provenance.schema.json.

    Call it from any test that runs training; ``Workflow.run`` already does after each run.
    """
    from snakeddp.provenance.schema import validate_file

    files = sorted(Path(directory).glob("runs/*/provenance.json"))
    if require:
        assert files, f"no provenance.json under {directory}"
    return [validate_file(path) for path in files]


class Workflow:
    """A Snakemake working directory outside the repository, driven through the real CLI."""

    def __init__(self, directory: Path, profile: str = "local") -> None:
        self.directory = directory
        self.profile = REPO / "profiles" / profile
        self.configfile = directory / "config.yaml"

    def write_config(self, config: dict) -> Path:
        self.configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.configfile

    def command(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(self.directory),
            "--configfile",
            str(self.configfile),
            "--profile",
            str(self.profile),
            *args,
        ]

    def run(
        self, *args: str, check: bool = True, timeout: float = 900, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            self.command(*args),
            cwd=self.directory,
            env=env or subprocess_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"snakemake {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
            )
        # Every provenance.json an end-to-end run leaves behind must match the schema.
        assert_valid_provenance(self.directory / "results", require=False)
        return done

    def planned_jobs(self, *args: str) -> dict[str, int]:
        """Rule -> job count of a dry run (empty when there is nothing to do)."""
        done = self.run("--dry-run", "--quiet", "rules", *args)
        counts: dict[str, int] = {}
        in_table = False
        for line in (done.stdout + done.stderr).splitlines():
            parts = line.split()
            if line.startswith("-----"):
                in_table = True
                continue
            if in_table and len(parts) == 2 and parts[1].isdigit():
                if parts[0] == "total":
                    break
                counts[parts[0]] = int(parts[1])
        return counts


@pytest.fixture
def workflow(tmp_path: Path) -> Workflow:
    return Workflow(tmp_path)


TINY = {
    "data": {"num_train_files": 3, "num_records_per_train_file": 300, "num_val_records": 200, "num_features": 8},
    "model": {"hidden_sizes": [16]},
    "trainer": {"max_epochs": 3, "batch_size": 32},
    "launch": {"mem_mb": 1000, "runtime": 10},
}


@pytest.fixture
def tiny_config() -> dict:
    """A config that trains in seconds; tests copy and adjust it."""
    import copy

    return copy.deepcopy(TINY)


# Secret-looking values in the environment of the shared sweep below; none may reach results/ or logs/.
SECRETS = {
    "AZURE_CLIENT_SECRET": "azure-client-secret-3f9c",
    "WANDB_API_KEY": "wandb-api-key-81be0c",
    "MY_TOKEN": "my-token-value-5d21",
    "NCCL_PROXY_URL": "https://alice:nccl-url-password-77aa@proxy.invalid:3128/",
    "SLURM_SPOOL_URL": "https://bob:slurm-url-password-90ff@spool.invalid/x",
}
SECRET_VALUES = ("azure-client-secret-3f9c", "wandb-api-key-81be0c", "my-token-value-5d21",
                 "nccl-url-password-77aa", "slurm-url-password-90ff")  # fmt: skip
SWEEP = {**TINY, "sweep": {"launch.devices": [1, 2]}}


@pytest.fixture(scope="session")
def sweep_workflow(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """The whole pipeline (data, two DDP runs of world size 1 and 2, report) run once for all tests
    that only read its results, with secret-looking variables set in its environment."""
    flow = Workflow(tmp_path_factory.mktemp("sweep"))
    flow.write_config(SWEEP)
    flow.run(env=subprocess_env(**SECRETS))
    return flow
