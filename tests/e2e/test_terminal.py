"""What the default run shows, typed in a fresh copy of this checkout with its output kept the ways
people keep long runs: `> run.log`, `>> run.log` under nohup, `| tee` and `script` (a
pseudo-terminal). Each keeps every epoch line once and the closing `Report:` line; the default run
says per job what it does and why in at most 120 lines, and Snakemake's own flags still give more
or less. One checkout: the default run, then three runs that each train one more epoch per run."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests import workflow_venv
from tests.checkout import copy_of_this_checkout
from tests.helpers import REPO, subprocess_env

pytestmark = pytest.mark.e2e

RUNS = ("devices-1", "devices-2")
EPOCH = re.compile(r"(devices-\d): epoch (\d+)/(\d+)  partition \d+  train_loss .* ETA \S+")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
README = REPO / "README.md"


def snakemake() -> str:
    """`snakemake` as the shell finds it in a user's activated venv: the test's (tests.workflow_venv)."""
    return shlex.quote(str(workflow_venv.snakemake()))


def typed(root: Path, command: str) -> str:
    """``command`` typed in a shell in ``root``; it must succeed."""
    done = subprocess.run(["bash", "-c", command], cwd=root, env=subprocess_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def shown(text: str) -> list[str]:
    return [COLOUR.sub("", line).rstrip("\r") for line in text.splitlines()]


def epochs(lines: list[str]) -> dict[str, list[tuple[int, int]]]:
    found: dict[str, list[tuple[int, int]]] = {run: [] for run in RUNS}
    for line in lines:
        if match := EPOCH.fullmatch(line):
            found[match[1]].append((int(match[2]), int(match[3])))
    return found


def ends_with_the_report(root: Path, lines: list[str], verbose: bool = False) -> None:
    """The `Report:` line, then only Snakemake's closing lines (--verbose adds debug lines)."""
    report = lines.index(f"Report: {root / 'results/report/report.html'}")
    assert report > max(i for i, line in enumerate(lines) if EPOCH.fullmatch(line))
    if not verbose:
        assert report == len(lines) - 3, lines[report:]
        assert lines[-2].startswith("Complete log(s): ") and lines[-1].startswith("Elapsed time: ")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_of_this_checkout(tmp_path_factory.mktemp("checkout"))
    typed(root, f"{snakemake()} --profile profiles/local > run.log 2>&1")
    return root


def test_the_default_run_into_a_file_says_what_each_job_does_and_why_in_at_most_120_lines(checkout):
    lines = shown((checkout / "run.log").read_text())
    assert len(lines) <= 120, "\n".join(lines)
    assert epochs(lines) == {run: [(epoch, 8) for epoch in range(1, 9)] for run in RUNS}
    jobs = [i for i, line in enumerate(lines) if re.match(r"Job \d+: ", line)]
    assert len(jobs) == 15 and all(lines[i + 1].startswith("Reason: ") for i in jobs)
    assert any(re.fullmatch(r"Job \d+: run devices-2: train \(log: logs/train/devices-2.log\)", line) for line in lines)
    assert lines.count("15 of 15 steps (100%) done") == 1
    chatter = re.compile(r"Select jobs to execute\.\.\.|Execute \d+ jobs\.\.\.|Finished jobid: .*|\[\w{3} \w{3} .*\]")
    assert not [line for line in lines if chatter.fullmatch(line)]
    ends_with_the_report(checkout, lines)
    # Snakemake's complete log keeps what the terminal leaves out, and the epochs too.
    (complete,) = (checkout / ".snakemake/log").glob("*.snakemake.log")
    kept = complete.read_text().splitlines()
    assert sum(line.startswith("Finished jobid: ") for line in kept) == 15
    assert epochs(kept) == epochs(lines)


def test_the_readmes_example_output_is_what_the_default_run_prints(checkout):
    """Its lines in order, consecutive unless a `…` line stands between; numbers may differ, an
    inline `…` stands for the rest of the line, /path/to/snakeddp for the checkout."""
    example = README.read_text().split("about 100 lines")[1].split("```\n")[1].splitlines()
    pattern = "(?m)^"
    for line in example:
        if line == "…":
            pattern += r"(?:.*\n)*?"
            continue
        escaped = re.escape(line).replace(re.escape("…"), ".*").replace(re.escape("/path/to/snakeddp"), ".*")
        pattern += re.sub(r"\d[\d,]*(?:\\\.\d+)?", r"[\\d,.]+", escaped) + r"\n"
    assert re.search(pattern, "\n".join(shown((checkout / "run.log").read_text())) + "\n"), example


def more_epochs(epochs_now: int) -> str:
    """Raising max_epochs continues both finished runs: one epoch line each, then the report."""
    return f"{snakemake()} --profile profiles/local --config 'trainer={{max_epochs: {epochs_now}}}'"


def test_a_file_appended_to_under_nohup_keeps_its_lines_and_quiet_rules_leaves_only_progress(checkout):
    """`--quiet rules`: no job lines; the epochs and the report still show. An unknown report.metrics
    entry is named on the terminal in one line."""
    before = (checkout / "run.log").read_text()
    metrics = "'report={metrics: [val_loss, val_f1]}'"
    typed(checkout, f"nohup {more_epochs(9)} {metrics} --quiet rules >> run.log 2>&1")
    text = (checkout / "run.log").read_text()
    assert text.startswith(before)
    lines = shown(text[len(before) :])
    assert epochs(lines) == {run: [(9, 9)] for run in RUNS}
    assert not [line for line in lines if re.match(r"Job \d+: |Reason: ", line)]
    (named,) = [line for line in lines if "report.metrics" in line]
    assert named.startswith("report: report.metrics names val_f1, which no run logged: not plotted. HINT: ")
    assert "val_loss" in named.split("HINT: ")[1]
    ends_with_the_report(checkout, lines)


def test_a_pipe_into_tee_keeps_every_line_and_printshellcmds_shows_the_commands(checkout):
    output = typed(checkout, f"{more_epochs(10)} --printshellcmds 2>&1 | tee tee.log")
    lines = shown((checkout / "tee.log").read_text())
    assert shown(output) == lines
    assert epochs(lines) == {run: [(10, 10)] for run in RUNS}
    assert any(line.startswith("Shell command: python -m snakeddp.launch ") for line in lines)
    ends_with_the_report(checkout, lines)


def test_a_pseudo_terminal_keeps_every_line_and_verbose_shows_the_scheduler(checkout):
    typed(checkout, f"script -qfec {shlex.quote(more_epochs(11) + ' --verbose')} typescript > /dev/null")
    lines = [line for line in shown((checkout / "typescript").read_text()) if not line.startswith("Script ")]
    assert epochs(lines) == {run: [(11, 11)] for run in RUNS}
    assert any(line.startswith("Finished jobid: ") for line in lines)
    ends_with_the_report(checkout, lines, verbose=True)
