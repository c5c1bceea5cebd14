"""Early checks: what a job would fail on later stops `snakemake` (dry run included) with one line
and a HINT, before any job runs; doing what the HINT says makes the same command go through."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.checkout import Checkout, error_lines
from tests.gpu_standin import StandIn
from tests.helpers import TINY, subprocess_env
from tests.mlflow_server import free_port

pytestmark = pytest.mark.e2e

LOCAL = ("--profile", "profiles/local", "-n")
AZUREML = ("--profile", "profiles/azureml", "-n")


@pytest.fixture
def checkout(tmp_path):
    checkout = Checkout(tmp_path)
    checkout.write_config({**TINY, "sweep": {"launch.devices": [1, 2]}})
    return checkout


def refused(checkout: Checkout, done, *fragments: str) -> str:
    """The one error line of a refused invocation: exit status 1, printed once, every fragment in it."""
    assert done.returncode == 1, done.stdout
    lines = error_lines(done.stdout)
    assert len(lines) == 1, done.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (checkout.root / "results").exists() and not (checkout.root / "logs").exists()
    return lines[0]


def planned(done) -> None:
    assert done.returncode == 0, done.stdout
    assert "This was a dry-run" in done.stdout


@pytest.mark.parametrize(
    ("bad", "message", "hint_followed"),
    [
        ("launch={launcher: srun}", "launch.launcher=srun needs the slurm profile", "launch={launcher: auto}"),
        ("launch={nodes: 2}", "launch.nodes=2, but the local profile runs on this machine only", "launch={nodes: 1}"),
        (
            "trainer={strategy: fsdp}",
            "trainer.strategy=fsdp needs GPUs",
            "trainer={strategy: ddp}",
        ),
        (
            "environment={lock: site.lock}",
            "environment.lock: site.lock does not exist",
            "environment={lock: null}",
        ),
    ],
)
def test_a_layout_the_local_profile_cannot_run_is_refused_before_any_job(checkout, bad, message, hint_followed):
    refused(checkout, checkout.snakemake(*LOCAL, "--config", bad, "launch={accelerator: cpu}"), message, "HINT:")
    planned(checkout.snakemake(*LOCAL, "--config", hint_followed))


@pytest.mark.parametrize(
    ("bad", "message", "hint_followed"),
    [
        ("trainer={strategy: fsdp}", "trainer.strategy=fsdp needs GPUs", "trainer={strategy: ddp}"),
        ("trainer={precision: 16-mixed}", "trainer.precision=16-mixed", "trainer={precision: bf16-mixed}"),
    ],
)
def test_what_the_cpu_cannot_train_as_asked_is_told_as_auto_decided_it(checkout, bad, message, hint_followed):
    """launch.accelerator auto (the default), on this machine without GPUs: the line says that auto decided the
    CPU, and its HINTs do what they say: ddp or bf16-mixed plan; launch.accelerator: gpu tells what is missing."""
    auto = "launch={accelerator: auto}"  # TINY pins cpu
    line = refused(checkout, checkout.snakemake(*LOCAL, "--config", bad, auto), message, "HINT:")
    assert "launch.accelerator auto trains this run on the CPU here" in line and "(or auto)" not in line, line
    planned(checkout.snakemake(*LOCAL, "--config", bad, auto, hint_followed))
    told = refused(checkout, checkout.snakemake(*LOCAL, "--config", bad, "launch={accelerator: gpu}"), "HINT:")
    assert "launch.accelerator: gpu asks for 1 GPU (launch.devices), and this machine shows no GPU" in told, told


@pytest.mark.dev_venv  # a GPU stand-in covers the dev venv's torch
def test_deepspeed_without_its_package_is_refused_and_fsdp_on_gpus_goes_through(checkout, tmp_path_factory):
    gpu = "launch={accelerator: gpu}"
    standin = StandIn(tmp_path_factory.mktemp("gpus"), count=2)  # one for each rank of devices-2
    on_gpus = {"env": standin.env(subprocess_env(), visible=None), "wrap": standin.command}
    refused(
        checkout,
        checkout.snakemake(*LOCAL, "--config", "trainer={strategy: deepspeed}", gpu, **on_gpus),
        "trainer.strategy=deepspeed needs the deepspeed package",
        "HINT: run `tools/add.sh deepspeed --stage train`",
    )
    planned(checkout.snakemake(*LOCAL, "--config", "trainer={strategy: fsdp}", gpu, **on_gpus))


def test_a_site_lock_that_exists_is_accepted(checkout):
    (checkout.root / "site.lock").write_bytes((checkout.root / "envs/requirements.lock").read_bytes())
    planned(checkout.snakemake(*LOCAL, "--config", "environment={lock: site.lock}"))


def test_more_threads_than_cores_is_refused_before_any_job_and_enough_cores_go_through(checkout):
    message = "run devices-2: needs 2 cores (launch.devices=2 x launch.threads_per_process=1), but snakemake may use 1"
    refused(
        checkout, checkout.snakemake("--profile", "profiles/local", "--cores", "1"), message, "HINT: run with --cores 2"
    )
    # A dry run shows the plan and notes the same line.
    done = checkout.snakemake(*LOCAL, "--cores", "1")
    planned(done)
    (line,) = error_lines(done.stdout)
    assert line.startswith(f"Dry run; a real run would stop here: {message}"), done.stdout
    planned(checkout.snakemake(*LOCAL, "--cores", "2"))


def test_a_secret_in_network_env_is_refused_and_exporting_it_instead_works(checkout):
    done = checkout.snakemake(*LOCAL, "--config", "network={env: {AWS_SECRET_ACCESS_KEY: s3cr3t-value}}")
    assert done.returncode == 1
    assert "network.env.AWS_SECRET_ACCESS_KEY: looks like a secret" in done.stdout
    assert "HINT: remove it from the config and export AWS_SECRET_ACCESS_KEY in the shell" in done.stdout
    assert "sweepable" not in done.stdout and "s3cr3t-value" not in done.stdout
    planned(checkout.snakemake(*LOCAL, env=subprocess_env(AWS_SECRET_ACCESS_KEY="s3cr3t-value")))


def test_running_from_a_subdirectory_is_refused_and_the_root_works(checkout):
    sub = checkout.root / "notebooks"
    sub.mkdir()
    line = refused(
        checkout,
        checkout.snakemake("-s", "../Snakefile", "--profile", "../profiles/local", "-n", cwd=sub),
        f"snakemake runs in {sub.resolve()}, a subdirectory of the checkout",
    )
    assert f"HINT: cd {checkout.root.resolve()} and run snakemake there." in line
    planned(checkout.snakemake(*LOCAL, cwd=checkout.root.resolve()))


SLURM_COMMANDS = {"sbatch", "sacct", "squeue", "srun", "sinfo", "scontrol", "scancel", "sacctmgr", "salloc", "sstat"}


def path_without_slurm(bin_dir: Path) -> str:
    """A PATH with every command of this one but Slurm's (the executor plugin itself runs `which`)."""
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for command in Path(directory).glob("*") if Path(directory).is_dir() else []:
            link = bin_dir / command.name
            if command.name not in SLURM_COMMANDS and not link.exists():
                link.symlink_to(command)
    return os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir)])


def test_slurm_profile_without_slurm_commands_is_refused_and_local_works(checkout, tmp_path):
    no_slurm = subprocess_env(PATH=path_without_slurm(tmp_path / "bin"))
    refused(
        checkout,
        checkout.snakemake("--profile", "profiles/slurm", "-n", env=no_slurm),
        "this machine has no sbatch and no sacct or squeue on PATH",
        "HINT: run snakemake on the cluster's login node",
    )
    planned(checkout.snakemake(*LOCAL, env=no_slurm))


def azureml_section(checkout: Checkout, **section) -> None:
    config = {**TINY, "launch": {**TINY["launch"], "accelerator": "gpu"}}
    checkout.write_config({**config, "azureml": section} if section else config)


@pytest.mark.dev_venv  # the azureml profile plans with its SDK
def test_azureml_profile_needs_its_section_a_workspace_and_the_sdk(checkout, tmp_path):
    azureml_section(checkout)
    refused(checkout, checkout.snakemake(*AZUREML), "the azureml profile needs an azureml: section", "HINT: copy")
    azureml_section(checkout, compute="gpu-cluster")
    refused(
        checkout,
        checkout.snakemake(*AZUREML),
        "azureml.workspace.subscription_id",
        "HINT: set azureml.workspace.config_file",
    )

    ids = {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "rg", "workspace_name": "ws"}
    (checkout.root / "config.json").write_text(json.dumps(ids))
    azureml_section(checkout, compute="gpu-cluster", workspace={"config_file": "config.json"})
    # An `azure` package without azure.ai.ml in it, first on the path: the SDK is not installed there.
    shadow = tmp_path / "no-sdk"
    (shadow / "azure").mkdir(parents=True)
    (shadow / "azure" / "__init__.py").write_text("")
    without_sdk = subprocess_env()
    without_sdk["PYTHONPATH"] = os.pathsep.join([str(shadow), without_sdk["PYTHONPATH"]])
    refused(
        checkout,
        checkout.snakemake(*AZUREML, env=without_sdk),
        "azureml.sdk=v2 needs azure.ai.ml",
        "HINT: run `tools/add.sh azure-ai-ml azure-identity --stage train`",
    )
    # The job's software, refused in the train job before: after Snakemake had removed a finished run's record.
    workspace = {"config_file": "config.json"}
    azureml_section(checkout, compute="gpu-cluster", workspace=workspace, environment={"source": "registered"})
    refused(
        checkout,
        checkout.snakemake(*AZUREML),
        "azureml.environment.source=registered but azureml.environment.registered is not set",
        "HINT: name the environment, e.g. registered: azureml:my-env:3",
    )
    registered = {"source": "registered", "registered": "azureml:my-env:3"}
    azureml_section(checkout, compute="gpu-cluster", workspace=workspace, environment=registered)
    planned(checkout.snakemake(*AZUREML))


MODEL = """
import lightning.pytorch as pl


class Net(pl.LightningModule):
    pass
"""


def test_a_model_target_is_imported_once_per_module_content(checkout):
    # TINY's built-in model section would be refused beside model.target: the config leaves it out.
    checkout.write_config({**{k: v for k, v in TINY.items() if k != "model"}, "sweep": {"launch.devices": [1, 2]}})
    cache = checkout.root / ".snakemake/snakeddp/targets.json"
    planned(checkout.snakemake(*LOCAL))
    assert not cache.exists(), "a config without user classes never starts the training interpreter"

    target = "model={target: 'mymodel:Net'}"
    refused(
        checkout,
        checkout.snakemake(*LOCAL, "--config", target),
        "model.target='mymodel:Net': cannot import module 'mymodel'",
        "HINT: the class must be importable in the training environment",
    )
    (checkout.root / "mymodel.py").write_text(MODEL)
    planned(checkout.snakemake(*LOCAL, "--config", target))
    assert list(json.loads(cache.read_text())) == ["model.target=mymodel:Net"]

    # A constructor argument the class does not take is refused before any job, naming the one it does take.
    with_width = "\n    def __init__(self, width: int = 4):\n        super().__init__()\n"
    (checkout.root / "mymodel.py").write_text(MODEL + with_width)
    misspelt = "model={target: 'mymodel:Net', kwargs: {widht: 8}}"
    refused(
        checkout,
        checkout.snakemake(*LOCAL, "--config", misspelt),
        "model.kwargs.widht: model.target='mymodel:Net' takes no 'widht'",
        "HINT: did you mean 'width'?",
    )
    planned(checkout.snakemake(*LOCAL, "--config", misspelt.replace("widht", "width")))
    assert "model.target=mymodel:Net(width)" in json.loads(cache.read_text())

    (checkout.root / "mymodel.py").write_text("class Net:\n    pass\n")
    refused(checkout, checkout.snakemake(*LOCAL, "--config", target), "is not a subclass of lightning.pytorch")


@pytest.mark.dev_venv  # an mlflow tracker
def test_an_unreachable_mlflow_server_stops_the_run_before_any_job_in_seconds(checkout):
    """MLflow's client retried for 4 min 22 s and ended in a traceback; the workflow now asks first."""
    closed = f"http://carol:mlflow-pw-4e1b@127.0.0.1:{free_port()}"
    mlflow = f"tracking={{mlflow: {{enabled: true, tracking_uri: '{closed}'}}}}"
    started = time.perf_counter()
    done = checkout.snakemake("--profile", "profiles/local", "--config", mlflow)
    elapsed = time.perf_counter() - started
    print(f"refused after {elapsed:.1f} s")
    line = refused(checkout, done, "no MLflow server answers at http://127.0.0.1:", "Connection refused", "HINT:")
    assert elapsed < 30 and "Traceback" not in done.stdout
    assert "mlflow-pw-4e1b" not in done.stdout and "carol" not in line
    # A dry run does not ask (nor do --report, --summary): it plans as before.
    planned(checkout.snakemake(*LOCAL, "--config", mlflow))
