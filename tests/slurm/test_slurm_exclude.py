"""A run that hung on a node is submitted again without it (snakeddp.slurm.exclude): the plugin's own sbatch,
and `snakemake --profile profiles/slurm` on the real test cluster with a rank on the second node stopped."""

from __future__ import annotations

import csv
import json
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import snakemake_executor_plugin_slurm as plugin
from snakemake.iocontainers import ResourceList

from snakeddp.run import tries
from snakeddp.run.layout import RunPaths
from snakeddp.slurm.exclude import Exclusions
from snakeddp.slurm.launcher import node_of_rank
from tests.helpers import left_running
from tests.slurm.cluster import NODES
from tests.slurm.workflow import SlurmWorkflow, config, ranks_once_saved

PARAMS = {"run_uuid": "r", "slurm_logfile": "log", "comment_str": "c", "account": "", "partition": "", "workdir": ""}


def hung_on(run_dir: Path, node: str) -> None:
    culprit = {"rank": 1, "host": "h", "node": node, "pid": 9, "step": 5, "epoch": 0, "phase": "backward"}
    record = {"kind": "stopped", "culprit": culprit, "stalled_s": 61.0, "limit_s": 60.0, "reached_step": 6, "line": "l"}
    entry = tries.entry(started=1.0, ended=70.0, outcome="hung", exit_code=1, launcher="srun", job_id="3",
                        resumed_from=None, saved_now=None, hang=record)  # fmt: skip
    tries.append(run_dir, entry)


def job(rule: str, run: str | None) -> SimpleNamespace:
    """What the plugin's get_submit_command reads of a Snakemake job (tests/slurm_requests.py does the same)."""
    wildcards = {"run": run} if run else {}
    return SimpleNamespace(
        resources=ResourceList(fromdict={"runtime": 5}), threads=1, rule=SimpleNamespace(name=rule),
        wildcards_dict=wildcards,
    )  # fmt: skip


def test_the_plugins_sbatch_leaves_out_the_nodes_a_runs_tries_hung_on_beside_those_that_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(plugin, "get_submit_command", plugin.get_submit_command)  # put back after the test
    run_dir = RunPaths.under(tmp_path / "results", "base").folder
    run_dir.mkdir(parents=True)
    hung_on(run_dir, "node7")
    said: list[str] = []
    assert Exclusions(("train", "search_train"), said.append, results=tmp_path / "results").start()
    train = plugin.get_submit_command(job("train", "base"), PARAMS, failed_nodes={"node3"})
    excluded = train.split("--exclude=", 1)[1].split()[0].split(",")
    assert sorted(excluded) == ["node3", "node7"]
    assert said == ["run base: submitting it without node7 (sbatch --exclude), where it hung before"]
    plugin.get_submit_command(job("train", "base"), PARAMS)
    assert len(said) == 1, "said once per run"
    assert "--exclude" not in plugin.get_submit_command(job("report", None), PARAMS)
    assert "--exclude" not in plugin.get_submit_command(job("train", "never-hung"), PARAMS)


@pytest.mark.slurm
@pytest.mark.e2e
def test_a_rank_stopped_on_the_second_node_is_named_and_the_retry_leaves_that_node_out(slurm_cluster, tmp_path):
    """The run's first try is put on the second node (a profile's slurm_extra may depend on Snakemake's
    ``attempt``); its rank 1 is stopped mid-epoch. The try ends within the bound with the line naming that
    rank and node and the file that holds both ranks' stacks, Snakemake's retry is submitted with --exclude of
    it and runs on the first node; the run's tries list the node left out. That the retry resumed is read from
    the run's own records: metrics.csv has every epoch once, those before the stop finished before it and the
    rest after, and rank 0's resume record in provenance names last.ckpt."""
    flow = SlurmWorkflow(tmp_path, slurm_cluster)
    flow.write_config(
        config(
            data={"num_train_files": 3, "num_records_per_train_file": 6001, "num_val_records": 500, "num_features": 16},
            trainer={"max_epochs": 4, "batch_size": 16, "early_stopping": {"enabled": False}},
            # 30 s: srun starts both ranks cold, and on a busy 2-core machine one may reach the meeting tens of
            # seconds after the other (a meeting bound of 10 s then names it as never come).
            launch={"devices": 2, "hang_timeout": 30},
        )
    )
    first, second = NODES
    # A Python expression, as Snakemake evaluates resources (the profile's YAML adds a level of quotes).
    put = f"'--signal=USR1@90 --nodelist={second}' if attempt == 1 else '--signal=USR1@90'"
    run_dir = tmp_path / "results" / "runs" / "base"
    snakemake = flow.popen(
        "--set-resources", f"train:slurm_extra={put}", "--retries", "1", "results/runs/base/provenance.json"
    )
    try:
        ranks = ranks_once_saved(snakemake, run_dir)
        placed = {p.environ()["SLURMD_NODENAME"] for p in ranks.values()}
        tried = RunPaths(run_dir).tries.read_text() if RunPaths(run_dir).tries.is_file() else "no try ended"
        assert placed == {second}, f"the first try was to run on {second}: {tried}"
        ranks[1].suspend()  # SIGSTOP
        stopped_at, stopped_wall = time.monotonic(), time.time()
        saved_epochs = len(metrics_of(run_dir))
        while not RunPaths(run_dir).tries.is_file():
            assert snakemake.poll() is None and time.monotonic() - stopped_at < 120, "the hung try never ended"
            time.sleep(0.2)
        took = time.monotonic() - stopped_at
        output, _ = snakemake.communicate(timeout=900)
    finally:
        if snakemake.poll() is None:
            snakemake.kill()
            snakemake.communicate()
    assert snakemake.returncode == 0, output[-5000:]
    assert took < 120, f"{took:.0f} s after the stop"
    lines = [line for line in output.splitlines() if "hung: rank 1 on node " in line]
    assert lines and all(f"rank 1 on node {second} (host " in line for line in lines), output[-5000:]
    assert f"run base: submitting it without {second} (sbatch --exclude), where it hung before" in output
    assert "Traceback" not in output and "Exception raised from" not in output
    hung, completed = json.loads(RunPaths(run_dir).provenance.read_text())["attempt"]["tries"]
    assert hung["outcome"] == "hung" and hung["hang"]["culprit"]["node"] == second
    assert hung["placement"]["nodes"] == [second] and hung["placement"]["excluded_nodes"] == []
    assert completed["outcome"] == "completed" and completed["resumed_from_step"] == hung["kept_step"] > 0
    recorded = tries.read(run_dir)
    assert recorded[1]["placement"] == {"nodes": [first], "excluded_nodes": [second]}
    stacks = (RunPaths(run_dir).hang_of(1) / "stacks.txt").read_text()  # the first try's
    assert f"Every rank's Python stack: {RunPaths(run_dir).hang_of(1) / 'stacks.txt'}." in lines[0] or (
        "hang/try-1/stacks.txt." in lines[0]
    ), lines[0]
    assert f"\n== rank 1 on {socket.gethostname()} (pid {ranks[1].pid}), the one the others waited for: taken" in stacks
    for rank in (0, 1):
        section = stacks.split(f"\n== rank {rank} on ", 1)[1].split("\n== rank", 1)[0]
        assert "not taken" not in section.split("\n", 1)[0] and 'File "' in section, section[:500]
    rows = metrics_of(run_dir)
    assert [int(row["epoch"]) for row in rows] == [0, 1, 2, 3], "every epoch once"
    done = [datetime.fromisoformat(row["finished_at"]).timestamp() for row in rows]
    assert 0 < saved_epochs < 4 and all(at < stopped_wall for at in done[:saved_epochs]), (done, stopped_wall)
    assert all(at > stopped_wall for at in done[saved_epochs:]), (done, stopped_wall)
    resumed = json.loads(RunPaths(run_dir).provenance.read_text())["training"]["resumed_from"]
    # last.ckpt, or its epoch's top-k checkpoint where the stop came between the two saves (the step is checked above).
    assert re.fullmatch(r"checkpoints/[^/]+\.ckpt", resumed["path"]), resumed
    assert not left_running(tmp_path, within=10)


def metrics_of(run_dir: Path) -> list[dict[str, str]]:
    """The run's metrics.csv, one row per epoch it finished."""
    with open(RunPaths(run_dir).metrics) as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slurm
def test_the_node_of_a_rank_that_never_came_is_where_slurm_placed_its_task(slurm_cluster):
    """srun (and mpirun's ppr:N:node) fill the allocation's nodes in order: the meeting names the node of a rank
    that never came from the job's node list alone."""
    env = {**slurm_cluster.env(), "SLURM_JOB_NODELIST": ",".join(NODES)}
    assert [node_of_rank(rank, 2, env) for rank in range(4)] == [NODES[0], NODES[0], NODES[1], NODES[1]]
    assert node_of_rank(4, 2, env) is None
