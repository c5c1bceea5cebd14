"""`snakeddp status` typed during a Slurm run on the real test cluster: a run whose job Slurm holds in its queue
is shown queued with its job and Slurm's reason, the one that trains with its ETA; afterwards every try of each
run has its queue wait as Slurm tells it (StartTime minus SubmitTime), never "not known" (issue 75, items 4-5)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from snakeddp.run import status
from tests.slurm.cluster import NODES
from tests.slurm.workflow import SlurmWorkflow, config

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


def typed_status(flow: SlurmWorkflow) -> list[dict]:
    """`snakeddp status --json` typed in the workflow's root, in the user's Slurm environment."""
    done = subprocess.run(
        [str(flow.bin / "snakeddp"), "status", "--json"],
        cwd=flow.directory, env=flow.env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_status_during_a_slurm_run_shows_the_queued_run_and_the_training_ones_eta(slurm_cluster, tmp_path):
    flow = SlurmWorkflow(tmp_path, slurm_cluster)
    flow.write_config(
        config(
            data={"num_train_files": 3, "num_records_per_train_file": 4001, "num_val_records": 300, "num_features": 16},
            # Epochs enough for a status typed every second or two to find a run mid-training under CI's load
            # (3 were missed: the run trained from one status to the next).
            trainer={"max_epochs": 8, "batch_size": 16, "early_stopping": {"enabled": False}},
            launch={"devices": 2},
            sweep={"seed": [1, 2]},
        )
    )
    # Both runs' jobs on the first node, whose two CPUs hold one: the second waits in Slurm's queue (Resources).
    typed = flow.command("--set-resources", f"train:slurm_extra='--nodelist={NODES[0]}'")
    snakemake = subprocess.Popen(
        typed, cwd=tmp_path, env=flow.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: dict[str, dict] = {}
    queued_runs = set()
    try:
        deadline = time.monotonic() + 600
        while not ({"queued", "training"} <= {row["state"] for row in seen.values()}):
            assert snakemake.poll() is None and time.monotonic() < deadline, f"never both queued and training: {seen}"
            rows = typed_status(flow)
            for row in rows:
                mid = row["state"] == "training" and row["eta_s"] is not None and 0 < (row["percent"] or 0) < 100
                if row["state"] == "queued" or mid:  # a run's last post, at its fit's end, says 100%
                    seen.setdefault(row["state"], row)
                queued_runs |= {row["run"]} if row["state"] == "queued" else set()
            time.sleep(1)
        output, _ = snakemake.communicate(timeout=900)
    finally:
        if snakemake.poll() is None:
            snakemake.kill()
            snakemake.communicate()
    assert snakemake.returncode == 0, output[-5000:]
    queued, training = seen["queued"], seen["training"]
    assert queued["run"] in ("seed-1", "seed-2") and queued["detail"].startswith("slurm job "), queued
    assert "pending" in queued["detail"], queued
    assert training["eta_s"] and 0 < training["percent"] < 100 and training["step"], training
    # Typed in a shell without the cluster's SLURM_CONF: one line, whose HINT is the shell typed_status types in.
    away = {key: value for key, value in flow.env().items() if key != "SLURM_CONF"}
    done = subprocess.run(
        [str(flow.bin / "snakeddp"), "status"],
        cwd=flow.directory,
        env=away,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = done.stderr.splitlines()
    assert done.returncode == 0 and line.startswith("snakeddp status: slurm: its queued runs are not shown: squeue")
    assert line.count("HINT:") == 1 and "SLURM_CONF" in line.partition("HINT:")[2], line
    after = typed_status(flow)
    assert [(row["run"], row["state"]) for row in after] == [("seed-1", "done"), ("seed-2", "done")], after
    waits = {}
    for run in ("seed-1", "seed-2"):
        tried = json.loads((tmp_path / "results/runs" / run / "tries.json").read_text())["tries"]
        assert all(isinstance(one["account"]["queue_wait_s"], float) for one in tried), tried
        waits[run] = tried[-1]["account"]["queue_wait_s"]
        assert tried[-1]["job_id"] and status.read(tmp_path / "results/runs" / run)["state"] == "done"
    # The run that waited for the other's training to end waited longest, and was shown queued meanwhile.
    waited = max(waits, key=waits.get)
    assert waits[waited] > 5 and waited in queued_runs, (waits, queued_runs)
