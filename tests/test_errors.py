"""The exception family and how its errors reach the user: one line, printed once, non-zero exit.

The end-to-end cases start the real launcher (torchrun, two processes, a tiny config), as the
train rule does, and read what the terminal and the run's log would show.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from snakeddp import config, errors
from snakeddp.cluster import base
from snakeddp.config import sources, targets
from snakeddp.data import partitions
from snakeddp.run import requirements, runs
from snakeddp.training import strategies
from tests.helpers import REPO, as_typed_in_a_terminal, launch, prepare, subprocess_env
from tests.tables import frame, params

USER_MODULE = """
import lightning.pytorch as pl


class NotAModule:
    pass


class Exploding(pl.LightningModule):
    def __init__(self, **kwargs):
        raise ValueError("the constructor refuses")


class Buggy(pl.LightningModule):
    def __init__(self, **kwargs):
        super().__init__()
        import torch

        self.layer = torch.nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        return 1 / 0

    def configure_optimizers(self):
        import torch

        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_every_error_class_is_one_family_rooted_at_config_error():
    assert config.ConfigError is errors.ConfigError
    for family_member in (
        targets.TargetError,
        strategies.StrategyError,
        requirements.TrackerError,  # raised where a tracker is checked (workflow and rank 0)
        partitions.DataIntegrityError,
        sources.DataSourceError,
        base.LaunchError,
        runs.RunNotFound,
    ):
        assert issubclass(family_member, errors.ConfigError), family_member
    # Callers that caught the builtin bases before the family existed still catch them.
    assert issubclass(partitions.DataIntegrityError, RuntimeError) and issubclass(runs.RunNotFound, LookupError)


def test_exit_code_prints_one_line_once_and_lets_bugs_through(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(errors, "SILENT_RANK_GRACE_S", 0)  # a silent rank's wait for rank 0
    monkeypatch.setattr(errors.signal, "signal", lambda *args: None)  # keep pytest's SIGTERM handling

    def refuse() -> int:
        raise errors.StrategyError("trainer.strategy=x is wrong. HINT: use ddp.")

    assert errors.exit_code("prog", refuse) == 1
    assert capsys.readouterr().err == "prog: trainer.strategy=x is wrong. HINT: use ddp.\n"
    assert errors.exit_code("prog", refuse, speak=False) == 1
    assert capsys.readouterr().err == ""
    failure = tmp_path / "failure.txt"
    assert errors.exit_code("first", refuse, failure_file=failure) == 1
    assert errors.exit_code("second", refuse, failure_file=failure) == 1
    assert failure.read_text() == "first: trainer.strategy=x is wrong. HINT: use ddp.\n"
    assert capsys.readouterr().err == ""
    with pytest.raises(ZeroDivisionError):
        errors.exit_code("prog", lambda: 1 // 0)


def test_a_full_disk_met_anywhere_is_one_line_from_the_process_that_met_it(capsys, tmp_path):
    """Any write's ENOSPC, not only atomic_write's, ends as one line: a write that names no file (a stream's) is
    said as a file of the run's folder, with the space left there (a real 64 KiB tmpfs). The line goes to the
    failure file, the traceback beside it; where the disk has no room even for the failure file, the line is
    printed instead and no empty failure file is left to stand for it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", disk], check=True)
    try:
        run, trace = disk / "run", disk / "run" / "trace.jsonl"
        run.mkdir()

        def append() -> int:  # a writer that removes what it began, as snakeddp's do
            try:
                with open(trace, "ab") as handle:
                    handle.write(b"0" * (1 << 20))
            except OSError:
                trace.unlink()
                raise
            return 0

        failure = run / "failure.txt"
        assert errors.exit_code("snakeddp.train", append, failure_file=failure) == 1
        assert capsys.readouterr().err == ""
        assert failure.read_text() == (
            f"snakeddp.train: no space left on the device writing a file in {run} (64.0 KiB free of 64.0 KiB on "
            f"{disk}). HINT: free space there, then run the same command again: what was finished is kept, and "
            "training resumes from its last checkpoint.\n"
        )
        assert "OSError: [Errno 28]" in failure.with_suffix(".traceback").read_text()

        failure.unlink()
        failure.with_suffix(".traceback").unlink()
        with open(disk / "filler", "wb") as filler:  # every block taken
            with pytest.raises(OSError):
                filler.write(b"0" * (1 << 20))
                filler.flush()
        assert errors.exit_code("snakeddp.train", append, failure_file=failure) == 1
        (printed,) = capsys.readouterr().err.splitlines()
        assert printed.startswith(f"snakeddp.train: no space left on the device writing a file in {run} (0 bytes ")
        assert not failure.exists(), "no empty failure file"
    finally:
        subprocess.run(["umount", disk], check=True)


def test_said_when_full_lets_other_errors_through_unchanged(tmp_path):
    with pytest.raises(OSError) as raised, errors.said_when_full(tmp_path, "the data in"):
        raise OSError(errno.EACCES, "Permission denied")
    assert not isinstance(raised.value, errors.NoSpaceError) and raised.value.errno == errno.EACCES


def test_ingesting_a_table_onto_a_full_disk_ends_the_step_in_one_line_and_leaves_nothing(tmp_path, disk):
    """The ingest step, as the data rule runs it: the table's partitions are written in place until the disk is
    full; the step removes them and says so in one line, without a traceback; the traceback is kept beside the
    job's log (its stderr)."""
    frame(rows=20_000).to_parquet(tmp_path / "t.parquet")
    out = disk / "ingest"
    log = tmp_path / "ingest.log"
    step = [sys.executable, "-m", "snakeddp.steps", "ingest", "--params", json.dumps(params(tmp_path / "t.parquet"))]
    with open(log, "w") as stderr:
        done = subprocess.run([*step, "--out", str(out)], cwd=REPO, env=subprocess_env(), stderr=stderr, check=False)
    assert done.returncode == 1
    said = log.read_text()
    (line,) = [line for line in said.splitlines() if "no space" in line]
    assert "Traceback" not in said and "ingest: 20,000 rows read" in said, said
    assert line == (
        f"snakeddp.steps: no space left on the device writing the table's partitions in {out} (256.0 KiB free of "
        f"256.0 KiB on {disk}). HINT: free space there, then run the same command again: what was finished is kept, "
        "and training resumes from its last checkpoint."
    ), line
    assert "OSError: [Errno 28] No space left on device" in (tmp_path / "ingest.log.traceback").read_text()
    assert not [p for p in disk.rglob("*") if p.is_file()], "no partition, partial or complete, is left"


CASES = {
    "target does not import": (
        {"model": {"target": "no_such_package.models:Net"}},
        "cannot import module 'no_such_package.models'",
    ),
    "target is not a LightningModule": ({"model": {"target": "usermodels:NotAModule"}}, "usermodels:NotAModule"),
    "target constructor raises": ({"model": {"target": "usermodels:Exploding"}}, "the constructor refuses"),
    "fsdp on CPU": ({"trainer": {"strategy": "fsdp"}}, "trainer.strategy=fsdp needs GPUs"),
    "unknown strategy option": (
        {"trainer": {"strategy_options": {"no_such_option": 1}}},
        "trainer.strategy_options no_such_option are not accepted",
    ),
    "srun on the local profile": ({"launch": {"launcher": "srun"}}, "launch.launcher=srun needs the slurm profile"),
    "two nodes on the local profile": ({"launch": {"nodes": 2}}, "starts processes on this machine only"),
}


def test_a_stopping_line_is_one_write_so_snakemakes_logging_thread_cannot_split_it(monkeypatch, tmp_path):
    """Snakemake 9 logs from a queue listener's thread: a line written as text and then a newline (what
    print does) once had a plugin's warning land between the two (CI: "...in the profile).MinJobAge ...")."""
    import threading

    from snakeddp.workflow import preflight

    class Stream:
        def __init__(self) -> None:
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    stream = Stream()
    monkeypatch.setattr(sys, "stderr", stream)
    with pytest.raises(SystemExit):
        preflight.stop(config.ConfigError("run a: no. HINT: yes."))
    assert stream.writes == ["run a: no. HINT: yes.\n"]
    # And for real, racing a thread that writes whole lines into the same file.
    with open(tmp_path / "terminal", "w") as out:
        done = threading.Event()

        def logger() -> None:
            while not done.is_set():
                out.write("warning\n")

        thread = threading.Thread(target=logger)
        thread.start()
        for _ in range(2000):
            errors.print_line("ours", out)
        done.set()
        thread.join()
    lines = (tmp_path / "terminal").read_text().splitlines()
    assert lines.count("ours") == 2000 and set(lines) == {"ours", "warning"}


def test_a_line_for_a_terminal_that_hung_up_is_dropped_not_raised():
    """The terminal Snakemake ran in, closed (a real pty whose master is gone): what the workflow says at its end
    (rules/hooks.smk, after the SIGHUP that closing it sent) cannot be shown, and is not a traceback either."""
    master, replica = os.openpty()
    os.close(master)
    terminal = open(replica, "w", encoding="utf-8")  # not `with`: its close flushes what it could not write, again
    try:
        errors.print_line("Stopped (SIGHUP). Nothing is lost: rerun the same command", terminal)
    finally:
        with contextlib.suppress(OSError):
            terminal.close()


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(CASES))
def test_launcher_reports_a_rank_error_as_one_line(tmp_path, case):
    overrides, message = CASES[case]
    (tmp_path / "usermodels.py").write_text(textwrap.dedent(USER_MODULE))
    run_yaml, manifest, run_dir = prepare(
        tmp_path, {**overrides, "launch": {"devices": 2, **overrides.get("launch", {})}}
    )
    result = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    shown = result.stdout + result.stderr
    assert result.returncode == 1, shown
    assert result.stderr.count("\n") == 1 and message in result.stderr and "HINT:" in result.stderr, shown
    assert shown.count(message) == 1, shown
    assert "Traceback" not in shown and "ChildFailedError" not in shown, shown


@pytest.mark.e2e
def test_ranks_started_by_hand_print_the_line_once_from_rank_0(tmp_path):
    (tmp_path / "usermodels.py").write_text(textwrap.dedent(USER_MODULE))
    run_yaml, manifest, run_dir = prepare(
        tmp_path, {"model": {"target": "usermodels:NotAModule"}, "launch": {"devices": 2}}
    )
    # --tee 3: torchrun prefixes each line a rank prints with the rank's name ([default0]: is rank 0).
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--tee=3"]
    train = ["-m", "snakeddp.train", "--launcher", "torchrun", "--config", str(run_yaml), "--run-dir", str(run_dir)]
    argv = [*torchrun, *train, "--data", str(manifest)]
    result = subprocess.run(argv, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, check=False)
    shown = result.stdout + result.stderr
    assert result.returncode != 0
    lines = [line for line in shown.splitlines() if "snakeddp.train: model.target='usermodels:NotAModule'" in line]
    assert len(lines) == 1 and "HINT:" in lines[0], shown
    # Rank 0 said it; rank 1 stopped without a word, and no rank printed a traceback (torchrun's own
    # ChildFailedError, after its ranks ended, is torchrun's to print).
    assert lines[0].startswith("[default0]:snakeddp.train: "), shown
    assert not [line for line in shown.splitlines() if line.startswith("[default1]:")], shown
    assert not [line for line in shown.splitlines() if line.startswith("[default") and "Traceback" in line], shown


@pytest.mark.e2e
def test_a_bug_in_the_users_code_is_named_at_its_line_and_its_traceback_kept(tmp_path):
    """One line naming the user's file and line (a bug of snakeddp's own, with no frame of the user's, keeps its
    traceback on the terminal: train.users_error), the traceback kept whole beside the failure file."""
    (tmp_path / "usermodels.py").write_text(textwrap.dedent(USER_MODULE))
    run_yaml, manifest, run_dir = prepare(tmp_path, {"model": {"target": "usermodels:Buggy"}, "launch": {"devices": 2}})
    result = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    assert result.returncode != 0
    (line,) = [line for line in result.stderr.splitlines() if "ZeroDivisionError" in line]
    assert "raised at usermodels.py:" in line and ", in your code" in line and "Traceback" not in result.stderr, line
    assert "return 1 / 0" in (run_dir / "failure.traceback").read_text()


def test_steps_subcommands_require_their_own_arguments(tmp_path):
    step = [sys.executable, "-m", "snakeddp.steps", "run-config", "--out", str(tmp_path / "run.yaml")]
    result = subprocess.run(step, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "the following arguments are required: --run-id, --run" in result.stderr
    assert "Traceback" not in result.stderr


def test_steps_report_a_snakeddp_error_as_one_line(tmp_path):
    missing = tmp_path / "no-such-table.csv"
    given = json.dumps(params(missing, partitions=1, classes=2, format="csv", features=["x"]))
    step = [sys.executable, "-m", "snakeddp.steps", "ingest", "--params", given, "--out", str(tmp_path / "ingest")]
    result = subprocess.run(step, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert (
        result.stderr
        == f"snakeddp.steps: data.table.path={str(missing)!r}: no such file or folder (relative to {REPO}). "
        "HINT: set data.table.path to the file or folder (a relative path is read from the directory snakemake "
        "runs in, the checkout's root), or make the table first.\n"
    )


# The ingest step as the data rule runs it (`python -m snakeddp.steps`), hung up by itself as it opens its first
# partition for writing: a closed terminal's SIGHUP mid-ingestion, which no sleep can aim at.
HUNG_UP_WHILE_WRITING = """
import os, runpy, signal, sys

out, sent = sys.argv[-1], []

def hung_up(event, args):
    if event == "open" and str(args[0]).startswith(out) and str(args[0]).endswith(".safetensors") and not sent:
        sent.append(os.kill(os.getpid(), signal.SIGHUP))

sys.addaudithook(hung_up)
runpy.run_module("snakeddp.steps", run_name="__main__", alter_sys=True)
"""


def test_a_stop_ends_a_data_step_in_one_line(tmp_path):
    """A closed terminal's SIGHUP (or Snakemake's relayed SIGTERM) in the middle of a table's ingestion: the step ends
    as a stop, in one line with a HINT and exit 75, not by the signal's default with nothing said; Snakemake removes
    its train/ as a failed job's, so no partition it began counts as made. No failed ingestion is recorded for the
    runs of the invocation training beside it (data.stream): the stop reached them too, and they stop as preempted."""
    frame(rows=20_000).to_parquet(tmp_path / "t.parquet")
    out = tmp_path / "ingest"
    given = json.dumps(params(tmp_path / "t.parquet"))
    step = [sys.executable, "-c", HUNG_UP_WHILE_WRITING, "ingest", "--params", given, "--out", str(out)]
    env = subprocess_env(SNAKEDDP_INVOCATION="a1")
    done = subprocess.run(
        step, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, preexec_fn=as_typed_in_a_terminal
    )
    assert done.returncode == 75, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "snakeddp.steps: stopped by SIGHUP before it finished; Snakemake removes what it wrote. HINT: rerun the same "
        "command to make it again (finished jobs do not run again)."
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / ".ingest-failed.json").exists()


@pytest.mark.parametrize("entry", ["exit_code", "supervisor"])
def test_ctrl_c_ends_a_job_by_sigint_without_a_traceback(entry):
    """Ctrl-C reaches a job's whole process group: it landed in the supervisor's argparse and the report's jinja2,
    and each job's log ended in a 25-line KeyboardInterrupt traceback. The job still dies of SIGINT, as Python's."""
    code = {
        "exit_code": "from snakeddp.errors import exit_code\n"
        "def main():\n    raise KeyboardInterrupt\n"
        "exit_code('snakeddp.steps', main)",
        "supervisor": "import runpy, sys\nsys.argv = ['supervisor', '--help']\n"
        "import argparse\n"
        "argparse.ArgumentParser.print_help = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)\n"
        "runpy.run_module('snakeddp.cluster.supervisor', run_name='__main__')",
    }[entry]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
