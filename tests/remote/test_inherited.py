"""snakeddp.remote.inherited: what every remote job inherits from the workflow that submitted it."""

from __future__ import annotations

import json

from snakeddp.remote import inherited
from snakeddp.run import variables as names

WORKFLOW = {
    names.NETWORK: json.dumps({"env": {"NCCL_DEBUG": "INFO"}}),
    names.TRACKING: '{"mlflow": {"enabled": true}}',
    names.SITE: '{"accelerator": "gpu"}',
    names.CUDA_FORWARD_COMPAT: "1",
    # The submitting shell's own network variables (a login node's interface), and the submitter's commit.
    "NCCL_SOCKET_IFNAME": "ib0",
    names.CODE_COMMIT: "0123abc",
    names.CODE_DIRTY: "1",
}


def test_a_job_gets_the_configs_network_tracking_site_and_forward_compat_and_the_submitters_commit_only():
    got = inherited.variables("azureml", WORKFLOW)
    assert got == {
        "NCCL_DEBUG": "INFO",
        names.TRACKING: WORKFLOW[names.TRACKING],
        names.SITE: WORKFLOW[names.SITE],
        names.CUDA_FORWARD_COMPAT: "1",
        names.PLATFORM: "azureml",
        names.CODE_COMMIT: "0123abc",
        names.CODE_DIRTY: "1",
    }


def test_its_ranks_run_as_the_platform_its_row_names():
    assert inherited.variables("databricks", WORKFLOW)[names.PLATFORM] == "spark"
