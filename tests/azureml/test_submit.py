"""The submitter: one clear error before anything is uploaded, and the submit-less mode end to end.

No Azure account is reachable here. The credential test runs the real DefaultAzureCredential
in an environment with no credentials at all (no AZURE_* variables, no az login, no managed
identity), which is what a user without `az login` has.
"""

import copy
import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace

import pytest
import yaml
from azure.ai.ml import load_job

from snakeddp.azureml import submit
from snakeddp.azureml.settings import AzureMLError, Settings
from snakeddp.azureml.submitted import Outcome
from snakeddp.remote.job import Submitted
from snakeddp.run import tries
from snakeddp.run.variables import PLATFORM_SECTION as AZUREML_CONFIG
from tests.azureml.plans import build_plan
from tests.helpers import TINY, Workflow, make_run, subprocess_env

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning"),
    pytest.mark.dev_venv,  # the azureml profile imports the AzureML SDK
]
WORKSPACE = {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "rg", "workspace_name": "ws"}


def submit_here(tmp_path, monkeypatch, capsys, azureml):
    """``submit.main`` here, as ``snakeddp.launch --platform azureml`` calls it: (status, stderr, run dir)."""
    run_yaml, manifest = make_run(tmp_path, copy.deepcopy(TINY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(AZUREML_CONFIG, json.dumps(azureml))
    args = Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, environment_record=None, dry_run=False)
    status = submit.main(args)
    return status, capsys.readouterr().err, run_yaml.parent


def launch(tmp_path, azureml, *extra, env=None):
    """``python -m snakeddp.launch --platform azureml`` as the train rule runs it."""
    run_yaml, manifest = make_run(tmp_path, copy.deepcopy(TINY))
    argv = [sys.executable, "-m", "snakeddp.launch", "--platform", "azureml", "--config", str(run_yaml)]
    argv += ["--run-dir", str(run_yaml.parent), "--data", str(manifest), *extra]
    environment = {**(env or subprocess_env()), AZUREML_CONFIG: json.dumps(azureml)}
    done = subprocess.run(argv, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    return done, run_yaml.parent


def test_missing_compute_is_one_error_before_anything(tmp_path, monkeypatch, capsys):
    status, err, run_dir = submit_here(tmp_path, monkeypatch, capsys, {"workspace": WORKSPACE})
    assert status == 1
    assert "azureml.compute is not set" in err and "az ml compute create" in err
    # The workspace the config names, so the command runs as printed (az needs both where no default is set).
    where = f"--resource-group {WORKSPACE['resource_group']} --workspace-name {WORKSPACE['workspace_name']})"
    assert where in err, err
    assert not (run_dir / "azureml").exists(), "nothing staged, nothing uploaded"


def test_missing_workspace_is_one_error_before_anything(tmp_path, monkeypatch, capsys):
    azureml = {"compute": "gpu-cluster", "workspace": {"resource_group": "rg"}}
    status, err, run_dir = submit_here(tmp_path, monkeypatch, capsys, azureml)
    assert status == 1
    assert "azureml.workspace.subscription_id, azureml.workspace.workspace_name missing" in err
    assert "config.json" in err
    assert not (run_dir / "azureml").exists()


def test_unreadable_workspace_config_file_names_the_key(tmp_path, monkeypatch, capsys):
    azureml = {"compute": "gpu-cluster", "workspace": {"config_file": "nowhere/config.json"}}
    status, err, _ = submit_here(tmp_path, monkeypatch, capsys, azureml)
    assert status == 1
    assert "azureml.workspace.config_file: cannot read" in err and "Download config.json" in err


def test_a_base_image_of_another_cuda_major_is_one_error_before_anything(tmp_path, monkeypatch, capsys):
    # The CUDA 12.6 image with the default build, torch's CUDA 13 wheel: refused before any connection.
    image = "mcr.microsoft.com/azureml/openmpi5.0-cuda12.6-ubuntu24.04:20250701.v1"
    azureml = {"compute": "gpu-cluster", "workspace": WORKSPACE, "environment": {"image": image}}
    status, err, run_dir = submit_here(tmp_path, monkeypatch, capsys, azureml)
    assert status == 1
    assert len(err.splitlines()) == 1 and err.count("HINT:") == 1, err
    assert f"azureml.environment.image={image} is a CUDA 12.6 image, but environment.cuda=13.0" in err
    assert not (run_dir / "azureml").exists(), "nothing staged, nothing uploaded"


def test_missing_credentials_fail_before_any_upload(tmp_path, monkeypatch, capsys):
    # What DefaultAzureCredential sees where nobody signed in: no AZURE_* variables, no az, an empty home.
    for name in [n for n in os.environ if n.startswith(("AZURE_", "IDENTITY_", "MSI_"))]:
        monkeypatch.delenv(name)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]))
    (tmp_path / "config.json").write_text(json.dumps(WORKSPACE))
    azureml = {"compute": "gpu-cluster", "workspace": {"config_file": "config.json"}}
    status, err, run_dir = submit_here(tmp_path, monkeypatch, capsys, azureml)
    assert status == 1
    (line,) = [line for line in err.splitlines() if "no usable Azure credentials" in line]
    assert "DefaultAzureCredential failed to retrieve a token" in line, "the SDK's own diagnosis is kept"
    assert "AzureCliCredential: Azure CLI not found on path" in line, line
    assert "az login" in line and "AZURE_CLIENT_ID" in line and "Nothing was uploaded" in line
    assert "aka.ms" not in err and len(err.strip().splitlines()) == 1, "one line, not a paragraph per credential"
    assert not (run_dir / "azureml" / "submission.json").exists(), "no job was submitted"
    assert not (run_dir / "run-state.json").exists(), "the run directory was left as it was"


def test_missing_sdk_says_which_extra_to_install(tmp_path):
    blocker = tmp_path / "block" / "sitecustomize.py"
    blocker.parent.mkdir()
    blocker.write_text(BLOCK_AZURE)
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), env["PYTHONPATH"]])
    done, _ = launch(tmp_path, {"compute": "gpu-cluster", "sdk": "v1", "submit": False}, env=env)
    assert done.returncode == 1
    assert "azureml.sdk=v1 needs azureml.core" in done.stderr
    assert "HINT: run `tools/setup.sh --azureml-v1` in the checkout" in done.stderr
    assert "source .venv-azureml-v1/bin/activate" in done.stderr and done.stderr.count("HINT:") == 1


# Makes every azure / azureml import fail, as in an install without the azureml extra.
BLOCK_AZURE = """
import sys


class BlockAzure:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("azure", "azureml"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")


sys.meta_path.insert(0, BlockAzure())
"""


def test_dry_run_writes_the_spec_and_how_to_submit_it(tmp_path):
    done, run_dir = launch(tmp_path, {"compute": "gpu-cluster", "workspace": WORKSPACE}, "--dry-run")
    assert done.returncode == 0, done.stderr
    spec = run_dir / "azureml" / "job.yml"
    load_job(spec)
    assert f"az ml job create --file {spec} --resource-group rg --workspace-name ws --set" in done.stdout
    assert not (run_dir / "run-state.json").exists()


@pytest.mark.e2e
def test_submit_false_writes_specs_through_the_workflow_and_nothing_looks_finished(tmp_path, tiny_config):
    workflow = Workflow(tmp_path, profile="azureml")
    config = {**tiny_config, "sweep": {"launch.devices": [1, 2]}}
    config["azureml"] = {"compute": "gpu-cluster", "distribution": "mpi", "submit": False}
    workflow.write_config(config)
    planned = workflow.planned_jobs()
    assert (planned["train"], planned["run_config"], planned["data_partition"]) == (2, 2, 3)
    done = workflow.run(check=False)
    assert done.returncode != 0, "a run that was never trained must not look finished"
    results = workflow.directory / "results"
    assert len(list(results.glob("data/*/manifest-3.json"))) == 1, "the data stage ran here"
    for run, devices in (("devices-1", 1), ("devices-2", 2)):
        spec = results / "runs" / run / "azureml" / "job.yml"
        job = load_job(spec)
        assert job.distribution.process_count_per_instance == devices and job.resources.instance_count == 1
        assert "--launcher mpirun" in job.command
        assert not (results / "runs" / run / "provenance.json").exists()
        log = (workflow.directory / "logs" / "train" / f"{run}.log").read_text()
        assert "azureml.submit is false, so nothing was submitted" in log
        assert f"az ml job create --file {spec}" in log
        document = yaml.safe_load(spec.read_text())
        assert (spec.parent / document["inputs"]["data"]["path"]).resolve().parent == (results / "data").resolve()
    assert not (results / "report" / "runs.csv").exists()
    assert "Error in rule train" in done.stderr and "Error in rule report" not in done.stderr


@pytest.mark.e2e
def test_a_finished_attempt_is_restored_without_submitting(tmp_path, monkeypatch, capsys, sweep_workflow):
    """Coming back to a key that already finished on AzureML restores it; nothing connects or uploads."""
    run_yaml, manifest = make_run(tmp_path, copy.deepcopy(TINY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(AZUREML_CONFIG, json.dumps({"compute": "gpu-cluster", "workspace": WORKSPACE}))
    args = Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, environment_record=None, dry_run=False)
    _, key = build_plan(args, Settings.from_environment())
    kept = run_yaml.parent / "attempts" / key[:12]
    kept.mkdir(parents=True)
    # A real record (restoring checks it against the provenance schema), as this key's, with the checkpoints it
    # lists (an attempt without them, pruned, trains again).
    trained = sweep_workflow.directory / "results/runs/devices-1"
    shutil.copytree(trained / "checkpoints", kept / "checkpoints")
    record = json.loads((trained / "provenance.json").read_text())
    record.update(origin_sha256=key, attempt={"id": key[:12], "restored": False})
    (kept / "provenance.json").write_text(json.dumps(record))
    assert submit.main(args) == 0
    assert "restored it, nothing trained" in capsys.readouterr().err
    record = json.loads((run_yaml.parent / "provenance.json").read_text())
    assert record["attempt"] == {"id": key[:12], "restored": True, "restored_at": record["attempt"]["restored_at"]}
    assert not (run_yaml.parent / "azureml" / "job.yml").exists(), "no job spec: nothing was submitted"


@pytest.mark.e2e
def test_a_search_submits_each_rung_run_with_the_rungs_budget(tmp_path, tiny_config):
    """Rung 0 of a search on the azureml profile: one job spec per run, training run.yaml at the
    rung's budget (azureml.submit false: nothing is submitted, and no rung looks decided)."""
    workflow = Workflow(tmp_path, profile="azureml")
    config = {**tiny_config, "sweep": {"model.lr": [0.1, 0.01]}}
    config["search"] = {"method": "successive_halving", "eta": 2, "min_epochs": 1}
    config["azureml"] = {"compute": "gpu-cluster", "submit": False}
    workflow.write_config(config)
    planned = workflow.planned_jobs()
    # Rungs of 1, 2 and 3 epochs: rung 0's runs are planned, the later rungs' once their decision exists.
    assert (planned["search_train"], planned["search_rung"]) == (2, 3) and "train" not in planned, planned
    done = workflow.run("--keep-going", check=False)  # each job fails (nothing submitted): both must run
    assert done.returncode != 0
    results = workflow.directory / "results"
    for run in ("lr-0.1", "lr-0.01"):
        staged = results / "runs" / run / "azureml"
        assert "--config run.yaml" in load_job(staged / "job.yml").command
        assert yaml.safe_load((staged / "code" / "run.yaml").read_text())["config"]["trainer"]["max_epochs"] == 1
        assert not list((results / "search" / run).glob("epochs-*.json")), "no record: nothing trained"
    assert not (results / "search" / "rung-0.json").exists()


def test_a_job_that_hung_ends_in_the_line_of_the_rank_that_named_the_node(tmp_path, monkeypatch):
    """The ranks of an AzureML job write hung.json into the run directory the job's output brings back; the
    train job's one line is then theirs (rank, host, AZUREML_NODE_NAME), not AzureML's exit-code text."""
    run_yaml, manifest = make_run(tmp_path, copy.deepcopy(TINY))
    monkeypatch.setenv(AZUREML_CONFIG, json.dumps({"compute": "gpu-cluster", "workspace": WORKSPACE, "submit": False}))
    args = Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, environment_record=None, dry_run=False)
    job = submit.AzureMLJob(args)
    downloaded = tmp_path / "downloaded"
    downloaded.mkdir()
    line = "snakeddp.train: run base hung: rank 1 on node 1f2e-node-2 (host 10.0.0.5) (pid 88) stopped advancing ..."
    culprit = {"rank": 1, "host": "10.0.0.5", "node": "1f2e-node-2", "pid": 88, "step": 9, "epoch": 0, "phase": "x"}
    hang = {"kind": "stopped", "culprit": culprit, "stalled_s": 70.0, "limit_s": 60.0, "reached_step": 9, "line": line}
    assert tries.write_hang(downloaded, hang)
    job.hang, job.collected = tries.take_hang(downloaded), True
    with pytest.raises(AzureMLError) as raised:
        job.judge(Submitted("AzureML", "job", "j-7", "https://ml.azure.com/runs/j-7"), Outcome("Failed", "exit 69"))
    said = str(raised.value)
    assert said.startswith(f"AzureML job j-7 ended Failed: {line}. Its checkpoints were downloaded: rerun to resume.")


def test_a_service_principal_that_cannot_sign_in_is_told_apart_from_a_missing_login(monkeypatch):
    """Its three variables set, the sign-in refused (here: an authority that does not answer): telling the user
    to export the variables they exported helps nobody."""
    import socket

    from snakeddp.azureml import credentials

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AZURE_CLIENT_ID", "00000000-0000-0000-0000-0000000000c1")
    monkeypatch.setenv("AZURE_TENANT_ID", "00000000-0000-0000-0000-0000000000d2")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "sp-secret-4e1f")
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", f"https://127.0.0.1:{port}")
    with pytest.raises(AzureMLError) as refused:
        credentials.default_credential()
    line = str(refused.value)
    assert "\n" not in line and "EnvironmentCredential: " in line, line
    assert "HINT: AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET are set" in line, line
    assert "sp-secret-4e1f" not in line
