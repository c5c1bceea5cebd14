"""Pieces of the workflow's early checks that the end-to-end tests (tests/e2e/test_preflight.py) cannot reach."""

from __future__ import annotations

import json
import sys

import pytest

from snakeddp import config
from snakeddp.config import ConfigError, parts
from snakeddp.contract import PreflightError
from snakeddp.run import requirements
from snakeddp.slurm import platform as slurm_platform
from snakeddp.util.hashing import sha256_file
from snakeddp.workflow import preflight
from tests.helpers import SRC, subprocess_env
from tests.mlflow_server import free_port


def test_module_file_is_found_without_importing_its_package(tmp_path):
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "model.py").write_text("raise RuntimeError('imported')\n")
    assert preflight.module_file("userpkg.model", [str(tmp_path)]) == package / "model.py"
    assert preflight.module_file("userpkg.missing", [str(tmp_path)]) is None
    assert preflight.module_file("userpkg.model.deeper", [str(tmp_path)]) is None


def tracking(**sections) -> parts.Tracking:
    return parts.Tracking.of(config.validate({"tracking": sections})["tracking"])


def test_a_pass_remembered_by_an_earlier_checker_is_checked_again(tmp_path):
    """targets.json remembered a class as checked by its module's sha256 alone: a check snakeddp added since (a
    constructor parameter the config does not give) was skipped, and the train job refused the class instead."""
    (tmp_path / "ownnames.py").write_text(
        "import lightning.pytorch as pl\n\n\nclass Net(pl.LightningModule):\n"
        "    def __init__(self, in_dim, hidden=8):\n        super().__init__()\n"
    )
    cache = tmp_path / "targets.json"
    key = "model.target=ownnames:Net(hidden)"
    cache.write_text(json.dumps({key: f"{sys.executable} {sha256_file(tmp_path / 'ownnames.py')}"}))
    env = subprocess_env(PYTHONPATH=str(SRC))
    targets = [("model.target", "ownnames:Net", "hidden")]
    with pytest.raises(PreflightError, match=r"needs 'in_dim', which the config does not give\. HINT"):
        preflight.check_targets(targets, sys.executable, tmp_path, env, cache)
    fixed = [("model.target", "ownnames:Net", "hidden,in_dim")]
    preflight.check_targets(fixed, sys.executable, tmp_path, env, cache)
    assert json.loads(cache.read_text())["model.target=ownnames:Net(hidden,in_dim)"].count(" ") == 2


def test_an_enabled_tracker_needs_its_package_and_disabling_it_is_enough(monkeypatch):
    monkeypatch.setitem(requirements.TRACKER_PACKAGES, "wandb", "snakeddp_not_installed_tracker")
    with pytest.raises(ConfigError, match=r"tracking.wandb.enabled is true but the snakeddp_not_installed_tracker "
                       r"package is not installed.*HINT: .* set tracking.wandb.enabled: false"):  # fmt: skip
        preflight.check_trackers(tracking(wandb={"enabled": True}))
    preflight.check_trackers(tracking(wandb={"enabled": False}))


def test_trackers_enabled_without_their_packages_are_one_error_whose_one_command_installs_them_all(monkeypatch):
    monkeypatch.setitem(requirements.TRACKER_PACKAGES, "tensorboard", "snakeddp_not_installed_board")
    monkeypatch.setitem(requirements.TRACKER_PACKAGES, "wandb", "snakeddp_not_installed_tracker")
    with pytest.raises(ConfigError) as raised:
        preflight.check_trackers(tracking(tensorboard={"enabled": True}, wandb={"enabled": True}))
    message = str(raised.value)
    assert message.count("HINT:") == 1 and "\n" not in message, message
    assert "tracking.tensorboard.enabled and tracking.wandb.enabled are true" in message, message
    assert "`tools/add.sh snakeddp_not_installed_board snakeddp_not_installed_tracker --stage train`" in message
    # The one that is installed is not named.
    monkeypatch.setitem(requirements.TRACKER_PACKAGES, "tensorboard", "json")
    with pytest.raises(ConfigError, match=r"^tracking.wandb.enabled is true .*`tools/add.sh snakeddp_not_installed_"
                       r"tracker --stage train`"):  # fmt: skip
        preflight.check_trackers(tracking(tensorboard={"enabled": True}, wandb={"enabled": True}))


def runs(save_top_k: int = 1) -> dict:
    return {"base": {"config": config.validate({"trainer": {"save_top_k": save_top_k}})}}


def test_register_model_needs_mlflow_on_and_a_best_checkpoint():
    off = tracking(mlflow={"register_model": "churn"})
    with pytest.raises(preflight.PreflightError, match=r"register_model='churn' .* tracking.mlflow.enabled is false"):
        preflight.check_registry(off, runs())
    on = tracking(mlflow={"enabled": True, "register_model": "churn"})
    with pytest.raises(preflight.PreflightError, match=r"run base: .* trainer.save_top_k: 0 keeps only last.ckpt"):
        preflight.check_registry(on, runs(save_top_k=0))
    # As the HINTs say: MLflow on, save_top_k 1; or no register_model.
    preflight.check_registry(on, runs())
    preflight.check_registry(tracking(), runs(save_top_k=0))


def test_the_server_is_asked_only_for_runs_to_train_and_not_for_azureml():
    closed = f"http://127.0.0.1:{free_port()}"
    mlflow = tracking(mlflow={"enabled": True, "tracking_uri": closed})
    with pytest.raises(preflight.PreflightError, match="no MLflow server answers at http://127.0.0.1"):
        preflight.check_tracking_server(mlflow, runs(), "local", {})
    without_uri = tracking(mlflow={"enabled": True})
    with pytest.raises(preflight.PreflightError, match="no MLflow server answers"):
        preflight.check_tracking_server(without_uri, runs(), "slurm", {"MLFLOW_TRACKING_URI": closed})
    preflight.check_tracking_server(mlflow, {}, "local", {})  # every run finished: no server needed
    preflight.check_tracking_server(mlflow, runs(), "azureml", {})  # its jobs reach the server from Azure
    preflight.check_tracking_server(without_uri, runs(), "local", {})  # the file store results/mlruns


@pytest.mark.parametrize("platform", ["azureml", "databricks"])
def test_a_tracking_password_never_travels_in_a_remote_jobs_spec(platform):
    """AzureML's job.yml and the Databricks request carry the tracking section: user:password@ is refused in one
    line that does not show it, and the URI the HINT leaves passes (the password then goes where it says)."""
    with_password = tracking(mlflow={"enabled": True, "tracking_uri": "https://ann:Ann5ecretPw@mlflow.example/x"})
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.check_tracking_server(with_password, runs(), platform, {})
    said = str(refused.value)
    assert "\n" not in said and "Ann5ecretPw" not in said and "https://***@mlflow.example/x" in said, said
    assert f"a {platform} job carries its tracking settings" in said and "HINT: remove user:password@" in said, said
    bare = tracking(mlflow={"enabled": True, "tracking_uri": "https://mlflow.example/x"})
    preflight.check_tracking_server(bare, runs(), platform, {})
    preflight.check_tracking_server(with_password, {}, platform, {})  # nothing to train: nothing sent
    if platform == "databricks":  # the HINT's keys are the config's, and a secret reference is kept as written
        reference = "{{secrets/mlflow/password}}"
        conf = {"spark.executorEnv.MLFLOW_TRACKING_PASSWORD": reference}
        checked = config.validate({"platform": "databricks", "databricks": {"new_cluster": {"spark_conf": conf}}})
        assert checked["databricks"]["new_cluster"]["spark_conf"] == conf
        assert "spark.executorEnv.MLFLOW_TRACKING_USERNAME" in said and "databricks.new_cluster.spark_conf" in said


@pytest.mark.parametrize("launcher", ["auto", "srun", "mpirun"])
def test_slurm_ranks_started_inside_the_image_are_refused(launcher):
    launch = parts.Launch.of(config.validate({"launch": {"launcher": launcher}})["launch"])
    with pytest.raises(
        preflight.PreflightError, match=r"run base: --sdm apptainer .* \(srun: not found\)\. HINT: "
    ) as info:
        slurm_platform.check_container("base", launch)
    assert str(info.value).count("HINT:") == 1 and "\n" not in str(info.value)


def test_torchrun_on_one_node_needs_no_slurm_client_in_the_image():
    slurm_platform.check_container(
        "base", parts.Launch.of(config.validate({"launch": {"launcher": "torchrun"}})["launch"])
    )
