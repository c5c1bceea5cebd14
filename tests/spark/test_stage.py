"""snakeddp.spark.stage without a cluster: the variables a forked rank gets (what TorchDistributor's torchrun
gave, read from a real task), its lines' way to the driver, and a rank forked from a worker that imported
what it needs, or started fresh where it did not or SNAKEDDP_WARM_START=0 says so."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

from snakeddp import cluster
from snakeddp.spark import jobside, stage
from tests.helpers import subprocess_env
from tests.spark.test_launcher import TASK


def test_a_forked_rank_sees_torchruns_variables_as_a_torchdistributor_task_did():
    env = stage.rank_environment(1, 2, "192.0.2.2", "43045", TASK[jobside.RDZV_ID])
    theirs = {
        key: value for key, value in TASK.items() if not key.startswith("SNAKEDDP_") and key != "CUDA_VISIBLE_DEVICES"
    }
    assert {key: env[key] for key in theirs} == theirs
    launcher, layout = cluster.resolve(None, {**env, jobside.APP_ID: "app-1"})
    assert launcher.name == "torchdistributor"
    assert (layout.rank, layout.local_rank, layout.world_size, layout.node_rank, layout.num_nodes) == (1, 0, 2, 1, 2)


def test_the_line_server_hands_on_a_tasks_lines_and_drops_a_connection_without_its_token():
    said: list[str] = []
    with stage.LineServer("127.0.0.1", said.append) as server:
        import socket

        with socket.create_connection(("127.0.0.1", server.port)) as stranger:
            stranger.sendall(b"not the token\nforged line\n")
        with stage.LineSender("127.0.0.1", server.port, server.token) as lines:
            assert lines.meet(0, "43045 rdzv-1", None) == "43045 rdzv-1"  # one task: it meets itself
            lines.send(b"epoch 1/2\n")
            lines.send(b"epoch 2/2\n")
        deadline = time.monotonic() + 10
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert said == ["epoch 1/2", "epoch 2/2"]


# Run in a fresh interpreter with no thread but its own, as a task's Python worker: it imports what a worker
# forked by snakeddp.spark.daemon has imported (or not), and starts a rank whose module prints how it was
# started and exits with 3; its lines go to the test's line server.
WORKER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
if sys.argv[3] == "imported":
    import snakeddp.train
from snakeddp.spark import stage
with stage.LineSender("127.0.0.1", int(sys.argv[4]), sys.argv[5]) as lines:
    lines.meet(0, "43045 rdzv-1", None)
    command = [sys.executable, "-m", "probe", "--flag"]
    code = stage.start_rank(command, {"RANK": "0", "PYTHONPATH": sys.argv[1]}, Path(sys.argv[2]), lines)
print(code)
"""
PROBE = """
import os, sys
print(os.environ["SNAKEDDP_RANK_START"], os.environ["RANK"], *sys.argv[1:], flush=True)
raise SystemExit(3)
"""


def started(tmp_path, imported: bool, warm: str) -> tuple[int, list[str]]:
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    settings = tmp_path / "rank-env.json"
    settings.write_text(json.dumps({"env": {"SNAKEDDP_WARM_START": warm}}))
    said: list[str] = []
    with stage.LineServer("127.0.0.1", said.append) as server:
        argv = [str(tmp_path), str(settings), "imported" if imported else "not", str(server.port), server.token]
        done = subprocess.run(
            [sys.executable, "-c", WORKER, *argv], env=subprocess_env(), capture_output=True, text=True, timeout=120
        )
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1]), said


def test_a_rank_is_forked_from_a_worker_that_imported_and_starts_fresh_otherwise(tmp_path):
    # Its exit status and its lines come back either way.
    assert started(tmp_path, imported=True, warm="1") == (3, ["warm 0 --flag"])
    assert started(tmp_path, imported=False, warm="1") == (3, ["cold 0 --flag"])
    assert started(tmp_path, imported=True, warm="0") == (3, ["cold 0 --flag"])


def meet_all(server: stage.LineServer, ranks: list[int], said: list[str]) -> dict[int, tuple[str | None, list[str]]]:
    """Each rank's task meeting at ``server`` (task 0 offers its port), started in ``ranks``' order: its
    answer, and what the server had said when the answer came."""
    answers: dict[int, tuple[str | None, list[str]]] = {}

    def task(rank: int) -> None:
        with stage.LineSender("127.0.0.1", server.port, server.token) as lines:
            answer = lines.meet(rank, "43045 rdzv-1" if rank == 0 else "", f"rank {rank} placed")
            answers[rank] = (answer, list(said))

    threads = [threading.Thread(target=task, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
        time.sleep(0.1)  # the last task comes well after the first
    for thread in threads:
        thread.join(30)
    return answers


def test_the_tasks_meet_at_the_line_server_once_all_came_with_every_placement_said_first():
    said: list[str] = []
    with stage.LineServer("127.0.0.1", said.append, world_size=3) as server:
        answers = meet_all(server, [2, 0, 1], said)
    # Every task gets task 0's port and rendezvous id, and only once every rank's placement was said.
    assert {rank: answer for rank, (answer, _) in answers.items()} == {rank: "43045 rdzv-1" for rank in range(3)}
    for _, seen in answers.values():
        assert sorted(seen) == ["rank 0 placed", "rank 1 placed", "rank 2 placed"]


def test_tasks_that_cannot_all_meet_at_the_line_server_meet_through_sparks_barrier(monkeypatch, capfd):
    monkeypatch.setattr(stage, "MEET_S", 0.5)
    said: list[str] = []
    with stage.LineServer("127.0.0.1", said.append, world_size=2) as server:
        # Task 0 never reaches the server: task 1, which did, is sent to the barrier once MEET_S is over.
        started = time.monotonic()
        (answer, _) = meet_all(server, [1], said)[1]
        assert answer is None and 0.5 <= time.monotonic() - started < 5
        # A task that comes late is sent there at once, as every task of the stage must meet in one place.
        (late, _) = meet_all(server, [0], said)[0]
        assert late is None and said == ["rank 1 placed", "rank 0 placed"]
    # A task that cannot reach the driver at all goes to the barrier with its placement on its stderr.
    with stage.LineSender("127.0.0.1", server.port, server.token) as lines:
        assert lines.meet(1, "", "rank 1 placed") is None
    assert "rank 1 placed" in capfd.readouterr().err
