"""A run trained by the real launcher with every tracker on, MLflow logging to a real `mlflow server`,
shared by the tests of the trackers and of the model registry (one training for both)."""

from __future__ import annotations

import pytest

from snakeddp import config
from snakeddp.workflow import jobenv
from tests.helpers import launch, prepare

# The registered model's name: every finished run of the session adds a version.
REGISTERED = "snakeddp-tiny"


def tracking_env(server) -> dict[str, str]:
    """What the workflow exports to a run with every tracker on, MLflow's on ``server`` registering the best model."""
    mlflow = {"enabled": True, "tracking_uri": server.uri, "register_model": REGISTERED}
    settings = config.validate(
        {"tracking": {"tensorboard": {"enabled": True}, "mlflow": mlflow, "wandb": {"enabled": True}}}
    )
    return jobenv.settings(settings)


@pytest.fixture(scope="session")
def tracked_run(tmp_path_factory, mlflow_server):
    """A 2-process run with every tracker on, started by snakeddp.launch (direct, the local default);
    MLflow logs to the session's server and registers the best model. (workdir, run_dir, server)."""
    tmp = tmp_path_factory.mktemp("tracked")
    overrides = {
        "launch": {"devices": 2},
        "trainer": {"max_epochs": 3, "early_stopping": {"enabled": False}},
        "model": {"lr": 0.01},
    }
    run_yaml, manifest, _ = prepare(tmp, overrides)
    run_dir = tmp / "results" / "runs" / "base"
    done = launch(run_yaml, manifest, run_dir, cwd=tmp, **tracking_env(mlflow_server))
    (tmp / "launch.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"see {tmp / 'launch.log'}:\n{done.stderr[-6000:]}"
    return tmp, run_dir, mlflow_server
