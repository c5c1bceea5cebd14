"""A finished run's best model as a new version in MLflow's model registry (``tracking.mlflow.register_model``).

Registered here, by rank 0 at the end of training, rather than in the export rule: the MLflow run
is open in this process; the tracking settings reach the training processes and no rule's params
(so turning registration on never reruns an export); and a version belongs to the attempt that
made the model: one per finished attempt, since a finished run that Snakemake leaves alone, or
an earlier attempt restored from ``attempts/``, trains nothing and registers nothing.

What is registered is ``snakeddp export``'s pair of plain files (model.safetensors + model.json,
``training.export``), logged as the MLflow run's ``model/`` artifacts and named as the version's
source. It is not an MLflow "flavor" (no MLmodel file): every flavor that rebuilds a Python model
stores it pickled, and ``snakeddp.load`` on the downloaded folder needs nothing unpickled.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from snakeddp.errors import TrackerError
from snakeddp.run.runs import load_run
from snakeddp.training.export import export

# The artifact folder of the MLflow run that holds the export, and the version's source.
ARTIFACT_PATH = "model"


def register(client: Any, mlflow_run_id: str, run_dir: Path, name: str) -> dict[str, Any]:
    """Export ``run_dir``'s best model, log it to MLflow run ``mlflow_run_id`` and register it as a
    new version of ``name``; returns what tracking/state.json keeps of it."""
    from mlflow.exceptions import MlflowException

    run = load_run(run_dir)
    with tempfile.TemporaryDirectory(prefix="snakeddp-export-") as folder:
        description = export(run, folder)
        tags = {
            "snakeddp.run_id": run.run_id,
            "snakeddp.attempt": run.attempt_id,
            "snakeddp.provenance_sha256": description["run"]["provenance_sha256"],
            "snakeddp.weights_sha256": description["weights"]["sha256"],
        }
        try:
            client.log_artifacts(mlflow_run_id, folder, artifact_path=ARTIFACT_PATH)
            try:
                client.create_registered_model(name)
            except MlflowException as error:
                if error.error_code != "RESOURCE_ALREADY_EXISTS":  # a name's later versions
                    raise
            source = f"{client.get_run(mlflow_run_id).info.artifact_uri}/{ARTIFACT_PATH}"
            version = client.create_model_version(name, source, run_id=mlflow_run_id, tags=tags)
        except MlflowException as error:
            raise TrackerError(
                f"run {run.run_id} finished, and MLflow refused to register its model as {name!r} "
                f"({' '.join(error.message.split())[:300]}). HINT: set tracking.mlflow.register_model to a name the "
                "registry accepts, or to null to register nothing, and rerun snakemake (the run is not trained again)."
            ) from None
    weights = description["weights"]["sha256"]
    return {"name": name, "version": int(version.version), "attempt": run.attempt_id, "weights_sha256": weights}
