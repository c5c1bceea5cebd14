"""tracking.mlflow.tracking_uri: databricks: the schema takes it, the run's tracking code hands it to
MLflow unchanged, MLflow's own client authenticates with the same DATABRICKS_HOST/DATABRICKS_TOKEN
chain (against the local stub), and the token reaches no record."""

from __future__ import annotations

import json

import pytest

from snakeddp import config
from snakeddp.run.mlflow_server import check_reachable, mlflow_uri, split_credentials
from snakeddp.util.redact import redact_text

TOKEN = "dapi-9a7d-mlflow-stub-token"


@pytest.mark.parametrize("uri", ["databricks", "databricks://team-profile"])
def test_the_schema_and_the_run_pass_a_databricks_uri_to_mlflow_unchanged(uri, tmp_path):
    tracking = config.validate({"tracking": {"mlflow": {"enabled": True, "tracking_uri": uri}}})["tracking"]
    assert tracking["mlflow"]["tracking_uri"] == uri
    resolved = mlflow_uri(tracking["mlflow"]["tracking_uri"], {}, tmp_path / "results" / "runs" / "base")
    assert split_credentials(resolved) == (uri, None, None)
    check_reachable(resolved)  # not a server snakeddp can probe: MLflow's own client reaches it
    assert redact_text(resolved) == uri  # what provenance records


def test_mlflows_databricks_store_authenticates_with_the_sdks_chain(stub, monkeypatch, tmp_path):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("DATABRICKS_HOST", stub.url)
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.databrickscfg of this machine's
    assert MlflowClient(tracking_uri="databricks").get_experiment_by_name("snakeddp") is None
    asked = [seen for seen in stub.seen if "/mlflow/experiments/get-by-name" in seen["path"]]
    assert asked and asked[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    recorded = {"tracking_uri": redact_text(mlflow_uri("databricks", {}, tmp_path))}
    assert TOKEN not in json.dumps(recorded)
