"""Every HINT that names a missing optional package, followed as written, in a copy of this checkout whose
venv is what `make run` installs (the core lock only): the one command in the HINT's backticks runs,
`make setup` runs again, the package is still there (pinned in envs/, at the version the dev lock has) and
the workflow that stopped goes on: tables in az://, s3:// and gs:// served by real local servers are listed
(and the one in az:// ingested), TensorBoard, MLflow and W&B log a tiny run, the azureml profile accepts its SDK,
a Delta table's version is planned and the spark profile plans a run once pyspark is there. (deepspeed's
HINT is the same command; it is in no lock, so following it resolves and builds deepspeed's sdist afresh,
whose build installs a torch from PyPI: not run here.)

A `pip install` (what these HINTs said before) lasted until the next set-up, which syncs the venv to the
locks and took the package out again."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from bench.azurite import Azurite
from bench.venvs import linked_core_venv
from snakeddp.environment.lock import read_lock
from tests.checkout import copy_of_this_checkout, hint_lines, typed
from tests.gcs_server import GCSServer
from tests.helpers import REPO, TINY
from tests.s3_server import S3Server
from tests.storage_checks import FEATURES, parquet

pytestmark = pytest.mark.e2e
DEV_LOCK = read_lock(REPO / "envs" / "requirements-dev.lock")
DRY_RUN = ("snakemake", "--profile", "profiles/local", "-n")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    root = copy_of_this_checkout(tmp_path_factory.mktemp("optional") / "snakeddp")
    # As `make run`'s set-up leaves it (its stamp included), so the set-up typed below finds it matching the lock
    # and returns at once, where it installed snakeddp again and imported what the stages import.
    linked_core_venv(root / ".venv", root, set_up=True)
    done = typed(root, "make", "setup")
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def write_config(checkout: Path, config: dict) -> None:
    (checkout / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def follow(checkout: Path, refused: subprocess.CompletedProcess) -> str:
    """The refusal's one HINT line, its one backticked command run as typed, then `make setup` again;
    returns the command."""
    assert refused.returncode != 0, refused.stdout + refused.stderr
    lines = hint_lines(refused)
    assert len(lines) == 1, refused.stdout + refused.stderr
    commands = re.findall(r"`([^`]+)`", lines[0].partition("HINT:")[2])
    assert len(commands) == 1, lines[0]
    followed = typed(checkout, "bash", "-c", commands[0])
    assert followed.returncode == 0, followed.stdout + followed.stderr
    again = typed(checkout, "make", "setup")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "removing" not in again.stdout and "changed since" not in again.stdout, again.stdout
    return commands[0]


def kept(checkout: Path, package: str, stage: str) -> None:
    """``package`` after the set-up: installed, in the core lock at the dev lock's version, in the stage's YAML."""
    version = DEV_LOCK.version(package)
    assert read_lock(checkout / "envs" / "requirements.lock").version(package) == version, package
    # The venv's own metadata, read here: a Python started for it cost 0.1 s of CPU a package.
    (site,) = (checkout / ".venv" / "lib").glob("python3*/site-packages")
    (dist,) = importlib.metadata.distributions(name=package, path=[str(site)])
    assert dist.version == version, package
    # Compiled as it was installed (the set-up compiles what its installs changed): a process that imports it under
    # PYTHONDONTWRITEBYTECODE=1 would compile it from source every time.
    init = min((f for f in dist.files or () if f.name == "__init__.py"), key=lambda f: len(f.parts))
    assert Path(importlib.util.cache_from_source(str(dist.locate_file(init)))).is_file(), f"{package}: no bytecode"
    pins = yaml.safe_load((checkout / "envs" / f"{stage}.yaml").read_text())["dependencies"][-1]["pip"]
    # Each pin carries its wheels' hashes (--require-hashes heads the list), as the locks do.
    assert pins[0] == "--require-hashes" and all(" --hash=sha256:" in pin for pin in pins[1:]), pins[:3]
    assert f"{package}=={version}" in [pin.split(" --hash=")[0] for pin in pins], package


def table_config(url: str) -> dict:
    table = {"path": url, "features": FEATURES, "label": "y"}
    return {**TINY, "data": {"source": "table", "num_train_files": 2, "num_classes": 1, "table": table}}


def test_a_delta_table_stops_with_a_hint_whose_command_lasts_and_then_its_version_is_planned(checkout):
    from deltalake import write_deltalake

    from tests.storage_checks import frame

    write_deltalake(str(checkout / "lake" / "churn"), frame(300, 1))
    write_config(checkout, table_config("lake/churn"))
    refused = typed(checkout, *DRY_RUN)
    assert "a Delta table needs the deltalake package" in refused.stdout + refused.stderr
    assert follow(checkout, refused) == "tools/add.sh deltalake --stage data"
    kept(checkout, "deltalake", "data")
    planned = typed(checkout, *DRY_RUN)
    assert planned.returncode == 0 and "data_table" in planned.stdout, planned.stdout + planned.stderr


def test_pyspark_stops_with_a_hint_whose_command_lasts_and_then_the_spark_profile_plans(checkout):
    """Second, after deltalake: each set-up imports every package added before it, so the cheapest to import come
    first and the trackers last. Every later tools/add.sh then re-locks with pyspark (an sdist only) in the core lock,
    and its throwaway venv takes the wheel uv built before (tools/pypi.toml); it was built again each time, 18 s of
    CPU, so this order took 325 s of CPU against 204-234 s with pyspark last (ed4dd83). Now 136 s against 147 s."""
    write_config(checkout, {**TINY, "launch": {**TINY["launch"], "devices": 2}})
    dry_run = ("snakemake", "--profile", "profiles/spark", "-n")
    refused = typed(checkout, *dry_run, MASTER="local[2]")
    assert "the spark platform's driver needs pyspark" in refused.stdout + refused.stderr
    assert follow(checkout, refused) == "tools/add.sh pyspark --stage train"
    kept(checkout, "pyspark", "train")
    planned = typed(checkout, *dry_run, MASTER="local[2]")
    assert planned.returncode == 0 and "This was a dry-run" in planned.stdout, planned.stdout + planned.stderr


def test_a_table_in_each_store_stops_with_a_hint_whose_command_lasts_and_then_the_table_is_ingested(
    checkout, tmp_path_factory
):
    azurite = Azurite(tmp_path_factory.mktemp("azurite"))
    s3 = S3Server(tmp_path_factory.mktemp("aws"))
    gcs = GCSServer(tmp_path_factory.mktemp("gcs"))
    try:
        stores = [
            ("adlfs", "az", azurite, {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string()}),
            ("s3fs", "s3", s3, s3.env()),
            ("gcsfs", "gs", gcs, gcs.env()),
        ]
        # az:// (the table each store's HINT is like) is ingested: its command, stopped and typed again after the
        # HINT, reads the table through the package; s3:// and gs:// are planned (each plan lists the table through
        # its package). A plan of its own before the ingestion was 1.8 s of CPU that the ingestion's plan repeats.
        ingest = ("snakemake", "--profile", "profiles/local", "--until", "data_manifest")
        for (package, scheme, server, env), command in zip(stores, [ingest, DRY_RUN, DRY_RUN], strict=True):
            server.upload("hints", "train.parquet", parquet(300, 1))
            write_config(checkout, table_config(f"{scheme}://hints/train.parquet"))
            refused = typed(checkout, *command, **env)
            assert f"needs the {package} package, which is not installed here" in refused.stdout + refused.stderr
            assert follow(checkout, refused) == f"tools/add.sh {package} --stage data"
            kept(checkout, package, "data")
            # The workflow then goes on.
            went_on = typed(checkout, *command, **env)
            said = went_on.stdout + went_on.stderr
            assert went_on.returncode == 0 and "data_table" in said, said
        (manifest,) = (checkout / "results" / "data").glob("*/manifest-2.json")
        written = json.loads(manifest.read_text())
        assert written["params"]["table"]["path"] == "az://hints/train.parquet"
        assert written["records"]["train"] + written["records"]["val"] == 300
        subprocess.run(["rm", "-rf", checkout / "results", checkout / "logs"], check=True)
    finally:
        azurite.stop()
        s3.stop()
        gcs.stop()


def test_the_azureml_sdk_stops_with_a_hint_whose_command_lasts_and_then_the_profile_plans(checkout):
    ids = {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "rg", "workspace_name": "ws"}
    (checkout / "config.json").write_text(json.dumps(ids))
    azureml = {"compute": "gpu-cluster", "workspace": {"config_file": "config.json"}}
    write_config(checkout, {**TINY, "launch": {**TINY["launch"], "accelerator": "gpu"}, "azureml": azureml})
    dry_run = ("snakemake", "--profile", "profiles/azureml", "-n")
    refused = typed(checkout, *dry_run)
    assert "azureml.sdk=v2 needs azure.ai.ml" in refused.stdout + refused.stderr
    assert follow(checkout, refused) == "tools/add.sh azure-ai-ml azure-identity --stage train"
    for package in ("azure-ai-ml", "azure-identity"):
        kept(checkout, package, "train")
    planned = typed(checkout, *dry_run)
    assert planned.returncode == 0 and "This was a dry-run" in planned.stdout, planned.stdout + planned.stderr


def test_each_tracker_stops_with_a_hint_whose_command_lasts_and_then_a_tiny_run_logs_to_all_three(checkout):
    tracking = {"tensorboard": {"enabled": True}, "mlflow": {"enabled": True}, "wandb": {"enabled": True}}
    write_config(checkout, {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1}, "tracking": tracking})
    # The tiny run is what stops, and what is typed again after the HINT (a dry run between them was 1.5-2.3 s of
    # CPU planning what the run plans again).
    train = ("snakemake", "--profile", "profiles/local", "--until", "train")
    refused = typed(checkout, *train)
    assert "packages are not installed in the training environment" in refused.stdout + refused.stderr
    assert not (checkout / "results" / "runs").exists(), "stopped before any job"
    # One HINT for the three: its one command installs them all.
    assert follow(checkout, refused) == "tools/add.sh tensorboard mlflow-skinny wandb --stage train"
    for package in ("tensorboard", "mlflow-skinny", "wandb"):
        kept(checkout, package, "train")

    trained = typed(checkout, *train)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    (run_dir,) = (checkout / "results" / "runs").iterdir()
    assert list((run_dir / "tracking" / "tensorboard").glob("events.out.tfevents.*"))
    assert [p for p in (run_dir / "tracking" / "wandb").glob("offline-run-*/run-*.wandb") if p.stat().st_size]
    # MLflow's file store (EXPERIMENT/RUN/metrics/KEY: one "timestamp value step" line a step), read as written: one
    # run, its val_loss logged. Its client, imported in a Python of the checkout's, was 1.7 s of CPU.
    (val_loss,) = (checkout / "results" / "mlruns").glob("*/*/metrics/val_loss")
    steps = [line.split() for line in val_loss.read_text().splitlines()]
    assert steps and all(len(step) == 3 and float(step[1]) >= 0 for step in steps), steps
