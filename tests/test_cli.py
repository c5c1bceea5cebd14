"""The snakeddp command: runs, verify and --version, as typed in a terminal."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from snakeddp import __version__
from snakeddp.cli import main
from snakeddp.util.numbers import readable
from tests.helpers import subprocess_env

pytestmark = pytest.mark.e2e


def test_runs_table(sweep_workflow, capsys):
    assert main(["runs", "--results", str(sweep_workflow.directory / "results")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    for column in ("run", "launch.devices", "val_loss", "epochs", "samples/s", "launcher"):
        assert column in header
    assert [line.split()[0] for line in lines[1:]] == ["devices-1", "devices-2"]
    assert "direct" in lines[1] and "3/3" in lines[1]


def test_runs_json_matches_provenance(sweep_workflow, capsys):
    results = sweep_workflow.directory / "results"
    assert main(["runs", "--json", "--results", str(results)]) == 0
    rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)}
    for run, row in rows.items():
        record = json.loads((results / "runs" / run / "provenance.json").read_text())
        assert row["best val_loss"] == record["training"]["best_val_loss"]
        assert row["launch.devices"] == record["config"]["launch"]["devices"]
        assert row["job id"] == record["launch"]["job_id"]
        # Numbers as numbers, for a script: the table's "8/8" and "99%" are for people.
        assert row["epochs"] == record["training"]["epochs_completed"], row
        assert row["goodput"] == record["timing"]["goodput"]["ratio"] and row["early stop"] is False, row


def test_no_runs(tmp_path, capsys):
    assert main(["runs", "--results", str(tmp_path)]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert "no finished runs" in line and line.count("HINT:") == 1, "one line with a HINT, as verify's"


def snakeddp(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The installed ``snakeddp`` command, as a user types it."""
    command = [str(Path(sys.executable).parent / "snakeddp"), *args]
    return subprocess.run(command, cwd=cwd, env=subprocess_env(), capture_output=True, text=True, check=False)


def test_version(tmp_path):
    done = snakeddp("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == f"snakeddp {__version__}"


def test_runs_from_a_subdirectory_prints_plain_numbers(sweep_workflow):
    inside = sweep_workflow.directory / "results" / "runs" / "devices-1" / "checkpoints"
    done = snakeddp("runs", cwd=inside)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["devices-1", "devices-2"]
    # A number in scientific notation starts a word; a local run's job id (a UUID) may hold "1e-4" inside one.
    assert not re.search(r"\b\d+(\.\d+)?e[+-]\d", done.stdout), done.stdout


def test_verify_without_a_run_verifies_every_run(sweep_workflow):
    done = snakeddp("verify", cwd=sweep_workflow.directory)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.findall(r"^snakeddp verify (\S+)", done.stdout, re.MULTILINE) == ["devices-1", "devices-2"]
    assert "MISMATCH" not in done.stdout
    assert done.stdout.splitlines()[-1] == "verify: all 2 runs match their provenance.", "one verdict for all runs"


def test_verify_without_runs_says_so(tmp_path):
    done = snakeddp("verify", cwd=tmp_path)
    assert done.returncode == 2 and "no finished runs" in done.stderr and "HINT:" in done.stderr


def test_runs_csv_holds_what_provenance_records(sweep_workflow):
    results = sweep_workflow.directory / "results"
    with open(results / "report" / "runs.csv", newline="") as handle:
        rows = {row["run_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"devices-1", "devices-2"}
    for run, row in rows.items():
        record = json.loads((results / "runs" / run / "provenance.json").read_text())
        assert float(row["at_best:val_loss"]) == record["training"]["best_val_loss"]
        assert int(row["best_epoch"]) == record["training"]["best_epoch"] + 1, "counted from 1, as the terminal"
        assert "best_val_loss" not in row and "best_val_acc" not in row, "named at_best: for what they are"
        assert int(row["param:launch.devices"]) == record["config"]["launch"]["devices"]
        assert row["stopped_early"] == str(record["training"]["stopped_early"])
        assert row["job_id"] == ("" if record["launch"]["job_id"] is None else str(record["launch"]["job_id"]))
        assert row["hosts"] == " ".join(record["launch"]["hosts"])


def test_help_is_plain_text_and_every_subcommand_describes_itself(tmp_path):
    done = snakeddp("--help", cwd=tmp_path)
    assert done.returncode == 0 and "``" not in done.stdout, done.stdout
    for command in ("runs", "compare", "verify", "prune"):
        page = snakeddp(command, "--help", cwd=tmp_path).stdout
        description = page.split("\n\n")[1]
        assert not description.startswith(("positional arguments", "options")) and len(description) > 60, page


@pytest.mark.parametrize(
    "typed, refused",
    [
        (("runs", "--bogus"), "snakeddp runs: unrecognized arguments: --bogus"),
        (("compare", "a"), "snakeddp compare: the following arguments are required: RUN_B"),
        (("status", "--json", "extra"), "snakeddp status: unrecognized arguments: extra"),
        (("frobnicate",), "snakeddp: argument command: invalid choice: 'frobnicate' (choose from 'runs', "),
    ],
)
def test_a_mistyped_command_is_one_line_naming_its_subcommand_whose_help_says_what_it_takes(tmp_path, typed, refused):
    done = snakeddp(*typed, cwd=tmp_path)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(refused), done.stderr
    hinted = lines[0].split("HINT: ", 1)[1].removesuffix(" says what it takes.").split()
    assert hinted[0] == "snakeddp" and hinted[-1] == "--help", lines
    page = snakeddp(*hinted[1:], cwd=tmp_path)
    assert page.returncode == 0 and page.stdout.startswith(f"usage: {' '.join(hinted[:-1])} "), page.stdout


@pytest.mark.parametrize("args", [("--help",), ("runs",)])
def test_output_into_a_pipe_its_reader_closed_ends_without_a_traceback(tmp_path, args):
    """`snakeddp runs | head -0`: the reader is gone before the first line is written."""
    command = [str(Path(sys.executable).parent / "snakeddp"), *args, "--results", str(tmp_path)]
    started = subprocess.Popen(
        command, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    started.stdout.close()
    assert started.wait(timeout=60) in (0, 1)
    assert started.stderr.read() == b""


def test_runs_without_a_config_lists_every_run_and_says_which_flags_tell_current_from_history(sweep_workflow):
    """The workflow ran with --directory and --configfile: no config/config.yaml beside its results."""
    plain = snakeddp("runs", cwd=sweep_workflow.directory)
    assert plain.returncode == 0 and "give the --configfile and --config you gave snakemake" in plain.stderr
    assert "history:" not in plain.stdout and "devices-2" in plain.stdout
    told = snakeddp("runs", "--json", "--configfile", "config.yaml", cwd=sweep_workflow.directory)
    assert told.returncode == 0 and told.stderr == "", told.stderr
    assert {row["run"]: row["current"] for row in json.loads(told.stdout)} == {"devices-1": True, "devices-2": True}
    other = snakeddp(
        "runs", "--json", "--configfile", "config.yaml", "--config", "sweep={seed: [9]}", cwd=sweep_workflow.directory
    )
    assert {row["run"]: row["current"] for row in json.loads(other.stdout)} == {"devices-1": False, "devices-2": False}
    # A key the sweep sets, typed with --config, is refused as snakemake refuses it (it would plan nothing it says),
    # in one line whose HINT, followed, plans the run it meant.
    flags = ["--configfile", "config.yaml", "--config"]
    swept = snakeddp("status", *flags, "launch={devices: 2}", cwd=sweep_workflow.directory)
    (line,) = swept.stderr.splitlines()
    assert swept.returncode != 0 and "the sweep sets launch.devices in every run" in line and "HINT: " in line, line
    hinted = re.search(r"--config '([^']+)'", line.partition("HINT: ")[2]).group(1)
    assert hinted == "sweep={launch.devices: [2]}"
    told = snakeddp("runs", "--json", *flags, hinted, cwd=sweep_workflow.directory)
    assert {row["run"]: row["current"] for row in json.loads(told.stdout)} == {"devices-1": False, "devices-2": True}


def test_a_crafted_record_is_left_out_of_runs_and_prune_in_one_line_and_the_others_listed(sweep_workflow, tmp_path):
    """One record whose run id is no run name (written by no snakeddp): the listing names it and shows the others,
    where it refused them all; the report still refuses it (tests/run/test_records_from_disk.py)."""
    import shutil

    results = tmp_path / "results"
    shutil.copytree(sweep_workflow.directory / "results" / "runs", results / "runs", symlinks=True)
    crafted = results / "runs" / "devices-2" / "provenance.json"
    crafted.write_text(json.dumps({**json.loads(crafted.read_text()), "run_id": "../../escape"}))
    for command in ("runs", "prune"):
        done = snakeddp(command, "--results", str(results), cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        (line,) = [line for line in done.stderr.splitlines() if "left out" in line]
        assert line.startswith(f"snakeddp {command}: left out {crafted}: records run id '../../escape'"), line
        assert line.count("HINT:") == 1
    assert "devices-1" in snakeddp("runs", "--results", str(results), cwd=tmp_path).stdout


def test_a_run_the_search_stopped_is_compared_as_its_record_at_its_last_rung(sweep_workflow, tmp_path, capsys):
    """`snakeddp runs` lists it as stopped by the search; compare said it "has not finished"."""
    import shutil

    from snakeddp.run import search

    results = tmp_path / "results"
    shutil.copytree(sweep_workflow.directory / "results" / "runs", results / "runs", symlinks=True)
    rung = results / "search" / "devices-1" / "epochs-3.json"  # where a rung's record goes (docs/search.md)
    rung.parent.mkdir(parents=True)
    shutil.move(results / "runs" / "devices-1" / "provenance.json", rung)
    plan = search.Plan(eta=2, budgets=(3, 6), metric="val_loss", mode="min")
    first = search.decide(plan, 0, {"one": ["devices-1"], "two": ["devices-2"]}, {"devices-1": 9.0, "devices-2": 1.0})
    search.write_decision(results / "search" / "rung-0.json", first)
    search.write_decision(
        results / "search" / "rung-1.json", search.decide(plan, 1, {"two": ["devices-2"]}, {"devices-2": 0.5})
    )

    assert main(["compare", "devices-1", "devices-2", "--results", str(results)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("compare devices-1 (A) with devices-2 (B)") and "launch.devices" in out, out
    said = "snakeddp compare: devices-1 was stopped by the search: compared as it was at 3 epochs, its record at"
    assert err == f"{said} that rung\n", err

    assert main(["verify", "devices-1", "--results", str(results)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"snakeddp verify: 'devices-1' was stopped by the search at rung 0 (3 epochs, its configuration ranked 2): it "
        f"has no provenance.json, only its record at that rung ({rung}). HINT: `snakeddp compare devices-1 RUN` "
        "compares that record with another run; removing search: from the config trains it to its whole budget "
        "(docs/search.md)."
    )


def later_attempt_failed(sweep_workflow, tmp_path) -> tuple[Path, Path, dict, str]:
    """A copy of the sweep's runs in which devices-1's finished attempt is followed by one that failed elsewhere (what
    a remote job's launcher does before it submits, lineage.prepare, and after the job failed); the results, the
    run's directory, its finished record and the later attempt's key."""
    import shutil

    from snakeddp.remote import status as remote_status
    from snakeddp.run import attempt

    results = tmp_path / "results"
    shutil.copytree(sweep_workflow.directory / "results" / "runs", results / "runs", symlinks=True)
    run_dir = results / "runs" / "devices-1"
    finished = json.loads((run_dir / "provenance.json").read_text())
    later = "f" * 64
    attempt.prepare(run_dir, later)
    remote_status.submitted(run_dir, "AzureML job sharp_lamp_42")
    remote_status.ended(run_dir, "failed")
    return results, run_dir, finished, later


def test_a_later_attempt_that_failed_leaves_the_run_listed_as_it_last_finished(sweep_workflow, tmp_path, capsys):
    """A finished local run, then an attempt elsewhere (another environment: another key) that failed: the listing
    showed the run as not finished, as if nothing had trained; it shows the finished attempt and names the later."""
    results, run_dir, finished, later = later_attempt_failed(sweep_workflow, tmp_path)
    kept = finished["attempt"]["id"]
    configfile = str(sweep_workflow.directory / "config.yaml")

    assert main(["runs", "--results", str(results), "--configfile", configfile]) == 0
    out = capsys.readouterr().out
    assert "not finished yet" not in out, out
    table, note = out.split("\n\n")[0].splitlines()[1:3], out.split("\n\n")[0].splitlines()[3]
    assert [line.split()[0] for line in table] == [f"devices-1@{kept}", "devices-2"], out
    best = finished["training"]["best_checkpoint"]["path"]
    assert note == (
        f"devices-1: its latest attempt {later[:12]} failed; shown is devices-1@{kept}, the last attempt that finished "
        f"({finished['training']['epochs_completed']} epochs, best checkpoint {kept}/{best}, kept under attempts/)"
    )
    assert (run_dir / "attempts" / kept / best).is_file()

    assert main(["runs", "--json", "--all", "--results", str(results), "--configfile", configfile]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(row["run"], row["current"]) for row in rows] == [(f"devices-1@{kept}", True), ("devices-2", True)]
    assert rows[0]["later_attempt"] == {"id": later[:12], "state": "failed"}
    assert rows[0]["best val_loss"] == finished["training"]["best_val_loss"]


def test_status_of_a_run_whose_later_attempt_failed_says_the_attempt_that_finished_before_it(
    sweep_workflow, tmp_path, capsys
):
    """The same run as above: status showed it only as failed, as if nothing had trained; it says the failure of the
    latest attempt and the earlier attempt that finished, as `snakeddp runs` lists it (RUN@ID)."""
    results, run_dir, finished, later = later_attempt_failed(sweep_workflow, tmp_path)
    kept = finished["attempt"]["id"]

    assert main(["status", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[1:3]] == [["devices-1", "failed"], ["devices-2", "done"]], lines
    best = finished["training"]["best_checkpoint"]["path"]
    score = finished["training"]["best_score"]
    assert lines[3:] == [
        f"devices-1: its latest attempt {later[:12]} failed; devices-1@{kept} finished before it "
        f"({finished['training']['epochs_completed']} epochs, best val_loss {score:.4g}, best checkpoint "
        f"{kept}/{best}, kept under attempts/)"
    ], lines

    assert main(["status", "--json", "--results", str(results)]) == 0
    rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["devices-1"]["state"] == "failed" and rows["devices-2"]["last_finished"] is None
    assert rows["devices-1"]["last_finished"] == {
        "run": f"devices-1@{kept}",
        "attempt": kept,
        "epochs": finished["training"]["epochs_completed"],
        "monitor": "val_loss",
        "best_score": score,
        "best_checkpoint": str(run_dir / "attempts" / kept / best),
    }
    assert (run_dir / "attempts" / kept / best).is_file()


def test_verify_of_every_run_checks_the_model_of_a_run_whose_later_attempt_failed(sweep_workflow, tmp_path, capsys):
    """`runs` lists devices-1 as the attempt that last finished; `verify` of every run left it out and said all
    runs match, and `verify devices-1` hinted every finished run but that attempt."""
    import shutil

    results, _, finished, _ = later_attempt_failed(sweep_workflow, tmp_path)
    kept = finished["attempt"]["id"]
    shutil.copytree(sweep_workflow.directory / "results" / "data", results / "data")  # what verify hashes

    assert main(["verify", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^snakeddp verify (\S+)", out, re.MULTILINE) == [f"devices-1@{kept}", "devices-2"], out
    assert out.splitlines()[-1] == "verify: all 2 runs match their provenance."

    assert main(["verify", "devices-1", "--results", str(results)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("snakeddp verify: 'devices-1' has no provenance.json: its latest attempt has not finished")
    named = re.search(r"HINT: its last finished attempt is (\S+),", line).group(1)
    assert named == f"devices-1@{kept}", line
    assert main(["verify", named, "--results", str(results)]) == 0, "the HINT, followed, verifies it"


def test_prune_of_an_attempt_says_to_name_its_run(tmp_path, capsys):
    """prune RUN@ID considered the earlier attempts of the attempt's own folder (none): it removed nothing and said
    so, as if that were the answer."""
    assert main(["prune", "--dry-run", "devices-1@71ce45", "--results", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "prune takes runs, not attempts" in line and line.count("HINT:") == 1, line
    assert "`snakeddp prune --dry-run --best N --last N devices-1`" in line, line


def test_export_to_a_file_is_one_line_and_its_message_reads_as_the_runs_table(sweep_workflow, tmp_path, capsys):
    """--to a file was mkdir's FileExistsError as a traceback; the export's line printed the score with 17 digits."""
    results = sweep_workflow.directory / "results"
    in_the_way = tmp_path / "notes.txt"
    in_the_way.write_text("mine")
    for to in (in_the_way, in_the_way / "model"):
        assert main(["export", "devices-1", "--to", str(to), "--results", str(results)]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert f"{in_the_way} is a file" in line and line.count("HINT:") == 1, line
    assert in_the_way.read_text() == "mine"

    assert main(["export", "devices-1", "--to", str(tmp_path / "export"), "--results", str(results)]) == 0
    best = json.loads((results / "runs" / "devices-1" / "provenance.json").read_text())["training"]["best_score"]
    assert capsys.readouterr().out == (
        f"devices-1: exported the best checkpoint (val_loss {best:.4g}) to {tmp_path / 'export'}\n"
    )


def test_status_of_a_done_run_says_its_samples_per_s_as_runs_does(sweep_workflow, capsys):
    """status showed a done run's last live pace (the whole try's, its first epoch included: 78,125) beside the
    runs table's 79,333 for the same run; a done run's row now says the one samples/s the report defines."""
    results = str(sweep_workflow.directory / "results")
    assert main(["runs", "--json", "--results", results]) == 0
    said = {row["run"]: row["samples/s"] for row in json.loads(capsys.readouterr().out)}
    assert main(["status", "--json", "--results", results]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["run"]: row["samples_per_s"] for row in rows if row["state"] == "done"} == said
    assert main(["status", "--results", results]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[4] for line in table[1:3]] == [readable(said["devices-1"]), readable(said["devices-2"])]


def test_verify_from_inside_results_runs_checks_the_data_and_hints_commands_that_work_there(
    sweep_workflow, tmp_path, monkeypatch, capsys
):
    """`cd results/runs; snakeddp verify devices-1` took the run directory as the bare "devices-1" and looked for its
    manifest under results/runs/results/data/: "MISMATCH manifest ... missing", no partition checked, and a HINT to
    `rm results/data/...` the good manifest, a path that is not there from results/runs."""
    import shutil

    checkout = tmp_path / "checkout"
    for part in ("runs", "data", "envs"):
        shutil.copytree(sweep_workflow.directory / "results" / part, checkout / "results" / part, symlinks=True)
    partition = next((checkout / "results" / "data").glob("*/train/part-00001.safetensors"))
    damaged = bytearray(partition.read_bytes())
    damaged[-1] ^= 1
    partition.write_bytes(bytes(damaged))
    monkeypatch.chdir(checkout / "results" / "runs")

    assert main(["verify", "devices-1"]) == 1
    out = capsys.readouterr().out
    failed = [line.split()[:2] for line in out.splitlines() if line.startswith("  MISMATCH")]
    assert failed == [["MISMATCH", "partition"]], out
    relative = partition.relative_to(checkout).as_posix()
    assert f"cd {checkout} && rm {relative} && snakemake --profile local {relative}" in out.splitlines()[-1], out


def test_a_later_attempts_log_moved_aside_by_another_invocation_is_still_named(sweep_workflow, tmp_path, capsys):
    """Any snakemake invocation moves an unfinished train job's log aside (logs/train/<run>.<UTC stamp>.log); after
    one, runs and status said the stopped attempt's state with no log at all."""
    results, _, _, later = later_attempt_failed(sweep_workflow, tmp_path)
    logs = results.parent / "logs" / "train"
    logs.mkdir(parents=True)
    for name in ("devices-1.20260101T000000Z.log", "devices-1.20260102T000000Z.log", "devices-1.config.log"):
        (logs / name).write_text("epoch 1/3 ...\n")
    newest = logs / "devices-1.20260102T000000Z.log"
    earlier = logs / "devices-1.20250101T000000Z.log"  # an attempt's before the one that finished
    earlier.write_text("epoch 1/3 ...\n")
    os.utime(earlier, (1735689600, 1735689600))

    assert main(["status", "--results", str(results)]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("devices-1: ")]
    assert f"its latest attempt {later[:12]} failed (its log: {newest}); " in note, note
    assert main(["runs", "--results", str(results)]) == 0
    assert f"failed (its log: {newest}); shown is devices-1@" in capsys.readouterr().out
    for log in logs.glob("devices-1.2026*.log"):
        log.unlink()
    assert main(["status", "--results", str(results)]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("devices-1: ")]
    assert f"its latest attempt {later[:12]} failed; " in note, "not the log of an attempt before the one that finished"


def test_plain_runs_says_whose_runs_are_not_finished_and_how_to_ask_for_yours(sweep_workflow, tmp_path, capsys):
    """Trained with --configfile, `snakeddp runs` as the README types it said 'not finished yet: devices-1,
    devices-2' (config/config.yaml's runs) as if the user's runs had not trained."""
    results = tmp_path / "results"
    shutil.copytree(sweep_workflow.directory / "results" / "runs", results / "runs", symlinks=True)
    mine = sweep_workflow.directory / "config.yaml"
    (tmp_path / "config").mkdir()
    checkout = yaml.safe_load(mine.read_text())
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump({**checkout, "experiment": "other"}))
    assert main(["runs", "--results", str(results)]) == 0
    said = capsys.readouterr().out
    assert (
        "not finished yet: other--devices-1, other--devices-2 (the runs config/config.yaml plans; give the "
        "--configfile you gave snakemake for yours)"
    ) in said, said
    assert main(["runs", "--results", str(results), "--configfile", str(mine), "--config", "experiment=other"]) == 0
    said = capsys.readouterr().out
    assert "not finished yet: other--devices-1, other--devices-2\n" in said, said


def test_runs_lists_a_run_whose_directory_holds_another_configs_attempt_under_history(tmp_path, capsys):
    """config/config.yaml edited (model.lr) after base finished, before snakemake trained it again: base was listed
    as current, its old attempt standing for the config's run."""
    from snakeddp import config as configuration
    from tests.helpers import TINY, merged, write_dataset
    from tests.report.test_configurations import write_run

    results = tmp_path / "results"
    write_run(results, write_dataset(tmp_path / "data", configuration.validate(TINY)["data"]), {}, [0.5], [0.9])
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump(TINY))
    assert main(["runs", "--results", str(results)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "base"
    config.write_text(yaml.safe_dump(merged(TINY, {"model": {"lr": 0.5}})))
    assert main(["runs", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "trained with another config (under history), which snakemake trains again: base\n\nhistory:" in out, out
    assert main(["runs", "--json", "--results", str(results)]) == 0
    assert [row["current"] for row in json.loads(capsys.readouterr().out)] == [False]


def test_runs_all_and_prune_see_the_unfinished_attempts_kept_under_attempts(tmp_path, capsys):
    """An interrupted attempt set aside by another config's (attempts/<id>/, no record) was in no listing and
    never pruned, its checkpoints kept on disk unseen."""
    from snakeddp import config as configuration
    from tests.helpers import TINY, write_dataset
    from tests.report.test_configurations import write_run

    results = tmp_path / "results"
    run = write_run(results, write_dataset(tmp_path / "data", configuration.validate(TINY)["data"]), {}, [0.5], [0.9])
    kept = run.paths.attempts / "0123456789ab"
    (kept / "checkpoints").mkdir(parents=True)
    (kept / "checkpoints" / "last.ckpt").write_bytes(b"x" * 1500)
    (kept / "metrics.csv").write_text("epoch,val_loss,finished_at\n0,0.7,2026-01-01T00:00:00+00:00\n")
    assert main(["runs", "--results", str(results)]) == 0
    assert "0123456789ab" not in capsys.readouterr().out, "only --all lists earlier attempts"
    assert main(["runs", "--all", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    unfinished = out.split("\nunfinished: ")[1].splitlines()
    assert unfinished[0].startswith("earlier attempts kept under attempts/ that never finished"), out
    assert unfinished[2].split() == ["base@0123456789ab", "1", "2026-01-01T00:00:00+00:00", "1.5", "kB"], out
    assert main(["runs", "--all", "--json", "--results", str(results)]) == 0
    row = json.loads(capsys.readouterr().out)[-1]
    assert row == {"run": "base@0123456789ab", "epochs": 1, "last epoch ended": "2026-01-01T00:00:00+00:00",
                   "checkpoints": 1500, "current": False, "unfinished": True}  # fmt: skip
    assert main(["prune", "--best", "0", "--last", "0", "--results", str(results)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line == (f"base@0123456789ab: removed {kept / 'checkpoints'} (1.5 kB; unfinished: set aside as "
                    "base@0123456789ab-pruned, which no attempt resumes)")  # fmt: skip
    assert main(["runs", "--all", "--results", str(results)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[::3] == ["base@0123456789ab-pruned", "pruned"]
