"""A node the ledger holds enough events of (results/nodes.json, snakeddp.run.ledger) is left out of later
invocations' train jobs on Slurm (snakeddp.slurm.exclude): the plugin's own sbatch, and `snakemake --profile
profiles/slurm` on the real test cluster after the second node hung under two runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import snakemake_executor_plugin_slurm as plugin

import snakeddp.config as configuration
from snakeddp.config.parts import Launch, Site
from snakeddp.run import ledger, tries
from snakeddp.slurm import nodes as slurm_nodes
from snakeddp.slurm.exclude import Exclusions
from tests.helpers import left_running, subprocess_env
from tests.run.test_ledger import hang, hung_try, launcher_args
from tests.slurm.cluster import NODES
from tests.slurm.test_slurm_exclude import PARAMS, job
from tests.slurm.test_slurm_nodes import node, partition, resources, slurm_answering
from tests.slurm.workflow import SlurmWorkflow, config, ranks_once_saved

DAY = 86400.0


def site(**settings) -> Site:
    defaults = {"accelerator": None, "gpu_type": None, "mem_mb_per_gpu": 1, "cpus_per_gpu": 1}
    return Site.of({**defaults, "exclude_after_events": 2, "exclude_within_days": 14, **settings})


def excluded(command: str) -> list[str]:
    return sorted(command.split("--exclude=", 1)[1].split()[0].split(",")) if "--exclude=" in command else []


def test_a_node_with_two_events_in_14_days_is_left_out_of_every_train_job_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(plugin, "get_submit_command", plugin.get_submit_command)  # put back after the test
    results, now = tmp_path / "results", time.time()
    ledger.record(results, "node7", "hang", "base", now - 3 * DAY)
    ledger.record(results, "node7", "slow", "other", now)
    ledger.record(results, "node8", "hang", "base", now - 20 * DAY)  # out of the window
    ledger.record(results, "node8", "hang", "base", now)
    said: list[str] = []
    assert Exclusions(("train", "search_train"), said.append, results=results, site=site()).start()
    assert excluded(plugin.get_submit_command(job("train", "never-hung"), PARAMS)) == ["node7"]
    assert excluded(plugin.get_submit_command(job("search_train", "b"), PARAMS, failed_nodes={"node3"})) == [
        "node3",
        "node7",
    ]
    assert excluded(plugin.get_submit_command(job("report", None), PARAMS)) == []
    (line,) = said
    assert line.startswith(
        f"leaving node7 out of every train job (sbatch --exclude): {ledger.path(results)} holds 2 or more events of "
        "each in the last 14 days (node7: hang "
    )
    assert line.endswith("(other)); `snakeddp nodes --clear node7` to use it again")
    wider = Exclusions(("train",), [].append, results=results, site=site(exclude_within_days=30))
    assert wider.start() and excluded(plugin.get_submit_command(job("train", "a"), PARAMS)) == ["node7", "node8"]
    never = Exclusions(("train",), said.append, results=results, site=site(exclude_after_events=None))
    assert never.start() and excluded(plugin.get_submit_command(job("train", "a"), PARAMS)) == [] and len(said) == 1


def test_what_the_line_says_to_type_schedules_the_node_again(tmp_path, monkeypatch):
    monkeypatch.setattr(plugin, "get_submit_command", plugin.get_submit_command)
    results = tmp_path / "results"
    for run in ("a", "b"):
        ledger.record(results, "node7", "hang", run)
    said: list[str] = []
    Exclusions(("train",), said.append, results=results, site=site()).start()
    typed = said[0].split("`")[1].split()
    assert typed == ["snakeddp", "nodes", "--clear", "node7"]
    command = [str(Path(sys.executable).parent / typed[0]), *typed[1:]]
    done = subprocess.run(command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert Exclusions(("train",), said.append, results=results, site=site()).start() and len(said) == 1
    assert excluded(plugin.get_submit_command(job("train", "a"), PARAMS)) == []


def test_a_node_that_reaches_its_events_while_the_invocation_goes_on_is_left_out_of_the_runs_submitted_after(
    tmp_path, monkeypatch
):
    """Two runs of a sweep hang on node9 (their launchers record it): the third run's job goes without it."""
    monkeypatch.setattr(plugin, "get_submit_command", plugin.get_submit_command)
    results, said = tmp_path / "results", []
    assert Exclusions(("train",), said.append, results=results, site=site()).start() and said == []
    assert excluded(plugin.get_submit_command(job("train", "a"), PARAMS)) == []
    ledger.record(results, "node9", "hang", "a")
    assert excluded(plugin.get_submit_command(job("train", "b"), PARAMS)) == [] and said == []
    ledger.record(results, "node9", "hang", "b")
    assert excluded(plugin.get_submit_command(job("train", "c"), PARAMS)) == ["node9"]
    assert excluded(plugin.get_submit_command(job("train", "d"), PARAMS)) == ["node9"]
    (line,) = said
    assert line.startswith("leaving node9 out of every train job (sbatch --exclude): ")
    ledger.path(results).write_text("{")  # damaged meanwhile: said once, and node9 stays left out
    assert excluded(plugin.get_submit_command(job("train", "e"), PARAMS)) == ["node9"]
    assert excluded(plugin.get_submit_command(job("train", "f"), PARAMS)) == ["node9"]
    assert len(said) == 2 and said[1].startswith("the ledger of nodes changed and cannot be read, so the nodes it")
    assert "HINT: move it aside" in said[1]


def test_a_run_the_left_out_nodes_leave_too_few_nodes_is_refused_in_one_line_and_clearing_one_lets_it_through(
    tmp_path,
):
    """Partition main has n1 and n2 up; n2 has two hangs. A one-node run goes to n1; a two-node run could not be
    submitted (sbatch refuses an --exclude that leaves too few), so the invocation stops before anything is."""
    results = tmp_path / "results"
    for run in ("a", "b"):
        ledger.record(results, "n2", "hang", run)
    up = slurm_answering([node(), node().replace("NodeName=n1", "NodeName=n2")], [partition()])
    main = slurm_nodes.TrainingNodes(resources(), ["train"], up)

    def runs(nodes: int) -> dict:
        return {"base": Launch.of(configuration.validate({"launch": {"nodes": nodes}})["launch"])}

    said: list[str] = []
    assert Exclusions(("train",), said.append, results=results, site=site()).start(runs(1), main)
    with pytest.raises(ledger.LedgerError) as raised:
        Exclusions(("train",), said.append, results=results, site=site()).start(runs(2), main)
    message = str(raised.value)
    assert message.startswith(
        f"run base asks for 2 node(s), and Slurm partition main keeps 1 up once n2 are left out for their events in "
        f"{ledger.path(results)}, so sbatch would refuse its job. HINT: once a node is repaired, `snakeddp nodes "
        "--clear n2`"
    )
    three = runs(3)  # more than the partition has at all: the check of the runs against the nodes says so
    assert Exclusions(("train",), said.append, results=results, site=site()).start(three, main)
    typed = message.split("`")[1].split()
    command = [str(Path(sys.executable).parent / typed[0]), *typed[1:], "--results", str(results)]
    assert subprocess.run(command, env=subprocess_env(), capture_output=True, check=False).returncode == 0
    assert Exclusions(("train",), said.append, results=results, site=site()).start(runs(2), main)


def test_a_run_that_hangs_at_its_own_place_on_two_nodes_leaves_neither_out(tmp_path, monkeypatch):
    """Run base's rank 1 stops at step 120 on node1, then on node2 (its launcher records both tries): the run's own
    hang. Neither its retry nor another run is submitted without them, where one event of a node is enough to leave
    it out; a hang of node2's own still is."""
    monkeypatch.setattr(plugin, "get_submit_command", plugin.get_submit_command)
    args = launcher_args(tmp_path)
    results = tmp_path / "results"
    for where in ("node1", "node2"):
        hung_try(args, hang(node=where, reached=120))
    said: list[str] = []
    assert Exclusions(("train",), said.append, results=results, site=site(exclude_after_events=1)).start()
    assert excluded(plugin.get_submit_command(job("train", "base"), PARAMS)) == []
    assert excluded(plugin.get_submit_command(job("train", "other"), PARAMS)) == [] and said == []
    ledger.record(results, "node2", "hang", "other")
    assert excluded(plugin.get_submit_command(job("train", "third"), PARAMS)) == ["node2"]
    assert said[0].startswith("leaving node2 out of every train job (sbatch --exclude): ") and "(other)" in said[0]
    assert "base" not in said[0], "the run's own hang is not among node2's events"


def test_a_damaged_ledger_stops_the_invocation_in_one_line_before_anything_is_submitted(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    ledger.path(results).write_text("not json")
    with pytest.raises(ledger.LedgerError, match=r"HINT: move it aside \(mv "):
        Exclusions(("train",), print, results=results, site=site()).start()


@pytest.mark.slurm
@pytest.mark.e2e
def test_a_node_that_hung_twice_is_left_out_of_the_next_invocations_runs(slurm_cluster, tmp_path):
    """Two runs of a sweep train side by side over both nodes (2 nodes x 1 task each); in each, the rank on the
    second node is stopped, each run hangs there and its launcher records the hang in the ledger: two events. The
    next invocation trains another run: it says in one line that the node is left out, and its job runs on the
    first node."""
    flow = SlurmWorkflow(tmp_path, slurm_cluster)
    first, second = NODES
    flow.write_config(
        config(
            data={"num_train_files": 3, "num_records_per_train_file": 6001, "num_val_records": 500, "num_features": 16},
            # More epochs than either run reaches: each hangs after its first.
            trainer={"max_epochs": 8, "batch_size": 16, "early_stopping": {"enabled": False}},
            launch={"nodes": 2, "devices": 1, "hang_timeout": 30},  # 30 s: test_slurm_exclude.py says why
            sweep={"seed": [1, 2]},
        )
    )
    runs = ("seed-1", "seed-2")
    snakemake = flow.popen("--retries", "0", *(f"results/runs/{run}/provenance.json" for run in runs))
    stopped = {}
    try:
        for run in runs:  # both trainings are submitted at once and share the nodes' cores
            ranks = ranks_once_saved(snakemake, tmp_path / "results" / "runs" / run)
            (on_second,) = [p for p in ranks.values() if p.environ()["SLURMD_NODENAME"] == second]
            on_second.suspend()  # SIGSTOP
            stopped[run] = on_second.pid
        output, _ = snakemake.communicate(timeout=600)
    finally:
        if snakemake.poll() is None:
            snakemake.kill()
            snakemake.communicate()
    assert snakemake.returncode != 0, output[-5000:]
    for run in runs:
        (tried,) = tries.read(tmp_path / "results" / "runs" / run)
        assert tried["outcome"] == "hung" and tried["hang"]["culprit"]["node"] == second, tried
        assert tried["hang"]["culprit"]["pid"] == stopped[run], tried
    events = ledger.read(tmp_path / "results")[second]
    assert sorted((e["kind"], e["run"]) for e in events) == [("hang", "seed-1"), ("hang", "seed-2")], events
    assert first not in ledger.read(tmp_path / "results")

    another = ("sweep={seed: [7]}", "trainer={max_epochs: 1}", "launch={nodes: 1, devices: 1}")
    nxt = flow.run("results/runs/seed-7/provenance.json", "--config", *another)
    said = nxt.stdout + nxt.stderr
    assert f"leaving {second} out of every train job (sbatch --exclude): results/nodes.json holds 2 or more" in said
    assert said.count(f"leaving {second} out of every train job") == 1
    tried = tries.read(tmp_path / "results" / "runs" / "seed-7")  # a retry, where the machine's load made one
    assert tried[-1]["outcome"] == "completed", tried
    assert all(t["placement"] == {"nodes": [first], "excluded_nodes": [second]} for t in tried), tried
    assert json.loads((tmp_path / "results" / "runs" / "seed-7" / "provenance.json").read_text())
    assert not left_running(tmp_path, within=10)
