"""The local workflow with warm starts on (the default) and off (SNAKEDDP_WARM_START=0): the same
partitions byte for byte, the same weights, and provenance tells how each train job and rank started."""

from __future__ import annotations

import copy
import json

import torch

from tests.helpers import TINY, Workflow, subprocess_env


def test_warm_and_cold_workflows_make_the_same_data_and_weights(tmp_path):
    config = {**copy.deepcopy(TINY), "sweep": {"model.lr": [0.01, 0.02]}}
    seen = {}
    for switch in ("1", "0"):
        workflow = Workflow(tmp_path / switch)
        workflow.directory.mkdir()
        workflow.write_config(config)
        done = workflow.run("--cores", "2", env=subprocess_env(SNAKEDDP_WARM_START=switch))
        assert "start cold" not in done.stdout + done.stderr  # on: nothing declined; off: the user's choice
        results = workflow.directory / "results"
        data = {p.relative_to(results): p.read_bytes() for p in sorted(results.glob("data/**/*.safetensors"))}
        runs = {}
        for record in sorted(results.glob("runs/*/provenance.json")):
            launch = json.loads(record.read_text())["launch"]
            weights = torch.load(record.parent / "checkpoints/last.ckpt", weights_only=True)["state_dict"]
            runs[record.parent.name] = (launch["job_start"], launch["rank_start"], weights)
        seen[switch] = data, runs
    (warm_data, warm_runs), (cold_data, cold_runs) = seen["1"], seen["0"]
    assert warm_data and warm_data == cold_data
    assert sorted(warm_runs) == sorted(cold_runs) == ["lr-0.01", "lr-0.02"]
    for run in warm_runs:
        assert warm_runs[run][:2] == ("warm", "warm") and cold_runs[run][:2] == ("cold", "cold")
        warm_weights, cold_weights = warm_runs[run][2], cold_runs[run][2]
        assert warm_weights.keys() == cold_weights.keys()
        assert all(torch.equal(warm_weights[name], cold_weights[name]) for name in warm_weights)
