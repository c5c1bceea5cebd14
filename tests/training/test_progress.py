"""Progress lines: one per epoch from rank 0 in the run's log and on Snakemake's terminal (local
platform), table ingestion and the report stage saying what they do, and where the report is."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from snakeddp.data.table import ingest
from snakeddp.training.progress import epoch_line
from snakeddp.util.terminal import VARIABLE, Relay
from tests.helpers import subprocess_env
from tests.tables import frame, params

ROW = {"epoch": 1, "partition": 1, "train_loss": 0.69312, "val_loss": 0.6, "val_acc": 0.5125,
       "samples_per_s": 49525.4, "epoch_seconds": 1.25}  # fmt: skip
EPOCH = re.compile(r"^(\S+): epoch (\d+)/(\d+)  partition \d+  train_loss \S+  val_loss \S+  val_acc \S+  "
                   r"[\d,.]+ samples/s  \S+/epoch  ETA \S+$")  # fmt: skip


def test_a_training_process_imports_none_of_the_reports_packages():
    """Every rank prints epoch lines with the report's number format; the runs table's pandas once
    came with it and cost every rank about 60 MB of RSS (bench/results.md, 5. Memory)."""
    report_only = ("pandas", "pyarrow", "rocrate", "jinja2")
    code = f"import sys, snakeddp.train; print(sorted(m for m in {report_only!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_epoch_line_says_epoch_partition_losses_speed_and_eta():
    line = epoch_line("lr-0.01", ROW, max_epochs=10, mean_epoch_s=1.5)
    assert line == (
        "lr-0.01: epoch 2/10  partition 1  train_loss 0.6931  val_loss 0.6  val_acc 0.5125  "
        "49,525 samples/s  1.2s/epoch  ETA 12.0s"
    )
    assert EPOCH.match(line)


def test_ingestion_says_what_it_reads_on_the_terminal(tmp_path, monkeypatch, capsys):
    said: list[str] = []
    relay = Relay(said.append)
    monkeypatch.setenv(VARIABLE, relay.start())
    frame(400).to_csv(tmp_path / "t.csv", index=False)
    ingest(params(tmp_path / "t.csv"), tmp_path / "out")
    relay.close()
    assert said == [
        f"ingest: reading {tmp_path / 't.csv'} (file 1 of 1)",
        "ingest: 400 rows read; writing 3 train partitions and validation",
    ]
    assert capsys.readouterr().err.splitlines() == said  # the job's log


def test_another_hosts_terminal_is_left_alone(tmp_path, monkeypatch):
    said: list[str] = []
    relay = Relay(said.append)
    relay.start()
    monkeypatch.setenv(VARIABLE, f"not-{socket.gethostname()}:{relay.path}")
    frame(50).to_csv(tmp_path / "t.csv", index=False)
    ingest(params(tmp_path / "t.csv", partitions=1), tmp_path / "out")
    relay.close()
    assert said == []


@pytest.mark.e2e
def test_sweep_shows_epochs_as_they_happen_and_ends_with_the_report(sweep_workflow):
    terminal = sweep_workflow.first_run.stderr.splitlines()
    for run in ("devices-1", "devices-2"):
        shown = [m.groups()[1:] for line in terminal if (m := EPOCH.match(line)) and m[1] == run]
        assert shown == [(str(epoch), "3") for epoch in (1, 2, 3)], terminal
        log = (sweep_workflow.directory / "logs" / "train" / f"{run}.log").read_text().splitlines()
        said = [line for line in terminal if line.startswith(f"{run}: ")]
        assert said[0] == f"{run}: training from epoch 1/3 on {run[-1]} process{'es' if run[-1] != '1' else ''}"
        assert [line for line in log if line.startswith(f"{run}: ")] == said
        # Every job starts with one line, its rule's message (and its reason), not a rule block.
        assert any(re.fullmatch(rf"Job \d+: run {run}: train \(log: logs/train/{run}.log\)", line) for line in terminal)
    assert not [line for line in terminal if re.fullmatch(r"(local)?rule \w+:", line)], terminal
    assert any(re.match(r"report: results/report/report.html from 2 runs$", line) for line in terminal)
    report = sweep_workflow.directory / "results" / "report" / "report.html"
    assert f"Report: {report}" in sweep_workflow.first_run.stdout.splitlines()
