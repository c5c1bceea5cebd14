"""Run history on the local profile: an edit keeps the earlier attempt, reverting it restores it."""

import copy
import json
import subprocess

import pytest

from tests import workflow_venv
from tests.helpers import subprocess_env
from tests.report.test_crate import validate, validator_cache  # noqa: F401 (the roc-validator fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]


def snakeddp(flow, *args):
    """The `snakeddp` command as a user types it, from the workflow's directory."""
    done = subprocess.run(
        [workflow_venv.snakeddp(), *args],
        cwd=flow.directory,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def record(flow):
    return json.loads((flow.directory / "results/runs/base/provenance.json").read_text())


def test_edit_then_revert_restores_the_finished_attempt(workflow, tiny_config, validator_cache, tmp_path):  # noqa: F811
    run_dir = workflow.directory / "results/runs/base"
    workflow.write_config(tiny_config)
    workflow.run()
    first = record(workflow)
    first_metrics = (run_dir / "metrics.csv").read_text()
    assert {key: first["attempt"][key] for key in ("id", "restored")} == {
        "id": first["origin_sha256"][:12],
        "restored": False,
    }
    assert [attempt_try["outcome"] for attempt_try in first["attempt"]["tries"]] == ["completed"]

    edited = copy.deepcopy(tiny_config)
    edited["model"]["lr"] = 0.01
    workflow.write_config(edited)
    workflow.run()
    second = record(workflow)
    assert second["attempt"]["id"] != first["attempt"]["id"] and second["config"]["model"]["lr"] == 0.01
    kept = run_dir / "attempts" / first["attempt"]["id"]
    assert json.loads((kept / "provenance.json").read_text())["origin_sha256"] == first["origin_sha256"]
    assert (kept / "checkpoints" / "last.ckpt").is_file(), "the earlier attempt keeps its checkpoints"
    page = (workflow.directory / "results/report/report.html").read_text()
    assert f'data-attempt="base@{first["attempt"]["id"]}"' in page, "the report's history shows the first attempt"

    workflow.write_config(tiny_config)
    done = workflow.run()
    third = record(workflow)
    assert third["attempt"]["id"] == first["attempt"]["id"] and third["attempt"]["restored"] is True
    assert third["training"] == first["training"] and third["timing"] == first["timing"], "nothing trained again"
    assert (run_dir / "metrics.csv").read_text() == first_metrics
    log = (workflow.directory / "logs/train/base.log").read_text()
    assert f"attempt {first['attempt']['id']} already finished" in log and "snakeddp.cluster.supervisor" not in log, log
    assert "run base: train" in done.stdout + done.stderr, "the train job ran, and restored instead of training"
    restored = f"base: attempt {first['attempt']['id']} already finished with this config, data and environment"
    assert restored in done.stderr and "restored it, nothing trained" in done.stderr, "the terminal says so"
    page = (workflow.directory / "results/report/report.html").read_text()
    assert f'data-attempt="base@{second["attempt"]["id"]}"' in page and 'id="row-base"' in page

    crate = json.loads((workflow.directory / "results/report/ro-crate-metadata.json").read_text())
    earlier = f"files/runs/base/attempts/{second['attempt']['id']}/provenance.json"
    assert earlier in {entity["@id"] for entity in crate["@graph"]} and f'href="{earlier}"' in page
    result = validate(workflow.directory / "results/report", validator_cache, tmp_path / "roc.json")
    assert result["passed"], json.dumps(result["issues"], indent=1)

    listed = {row["run"]: row for row in json.loads(snakeddp(workflow, "runs", "--all", "--json"))}
    assert set(listed) == {"base", f"base@{second['attempt']['id']}"}
    assert listed["base"]["best val_loss"] == first["training"]["best_val_loss"]
    assert "base@" not in snakeddp(workflow, "runs"), "without --all only current runs are listed"

    diff = snakeddp(workflow, "compare", "base", f"base@{second['attempt']['id'][:6]}")
    assert "model.lr" in diff and "0.01" in diff, diff

    second_dir = run_dir / "attempts" / second["attempt"]["id"]
    preview = snakeddp(workflow, "prune", "--best", "0", "--last", "0", "--dry-run")
    assert "would remove" in preview and (second_dir / "checkpoints").is_dir(), "a dry run removes nothing"
    snakeddp(workflow, "prune", "--best", "0", "--last", "0")
    assert not (second_dir / "checkpoints").exists() and (second_dir / "provenance.json").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file(), "the current attempt is never pruned"
    assert f"base@{second['attempt']['id']}" in snakeddp(workflow, "runs", "--all")
    final = workflow.run()
    assert "Nothing to be done" in final.stdout + final.stderr


def typed(flow, *args):
    """`snakeddp ARGS` as typed in the workflow's directory: (exit status, stdout, stderr)."""
    done = subprocess.run(
        [workflow_venv.snakeddp(), *args], cwd=flow.directory, env=subprocess_env(), capture_output=True, text=True
    )
    return done.returncode, done.stdout, done.stderr


def test_a_pruned_attempt_is_not_restored_but_trained_again_and_its_record_stays(workflow, tiny_config):
    """The user's walk through docs/report.md: a finished attempt kept under attempts/, pruned, then its config put
    back. It was restored without a checkpoint ("restored it, nothing trained", verify: 3 x MISMATCH missing)."""
    run_dir = workflow.directory / "results/runs/base"
    five = copy.deepcopy(tiny_config)
    five["trainer"]["max_epochs"] = 5
    workflow.write_config(five)
    workflow.run()
    pruned_id = record(workflow)["attempt"]["id"]
    edited = copy.deepcopy(five)
    edited["model"]["lr"] = 0.01
    workflow.write_config(edited)
    workflow.run()
    assert "removed the checkpoints of 1 earlier attempt(s)" in snakeddp(
        workflow, "prune", "--best", "0", "--last", "0"
    )

    # The pruned attempt, asked for by its id: its checkpoints were pruned, which is no damage.
    code, out, err = typed(workflow, "verify", f"base@{pruned_id[:3]}")
    assert code == 0, out + err
    assert out.splitlines()[0].startswith(f"snakeddp verify base@{pruned_id} ("), out
    assert out.count("pruned    checkpoint") == 3 and "MISMATCH" not in out, out
    code, out, err = typed(workflow, "export", f"base@{pruned_id[:3]}")
    (line,) = err.splitlines()
    assert code == 2 and f"base@{pruned_id}: its checkpoints were pruned by `snakeddp prune`" in line, err
    assert "provenance.json" not in line.partition("HINT:")[2], "nothing tells the user to delete a record"
    assert "or train it again: put back the config it trained (`snakeddp compare base base@" in line, line

    # A 3-epoch attempt of the first config: nothing to continue (the 5-epoch one is longer, and pruned).
    three = copy.deepcopy(tiny_config)
    workflow.write_config(three)
    workflow.run()
    continued_id = record(workflow)["attempt"]["id"]

    # The config put back: the pruned attempt is not restored; the run continues the 3-epoch one instead.
    workflow.write_config(five)
    done = workflow.run()
    log = (workflow.directory / "logs/train/base.log").read_text()
    said = [line for line in (done.stdout + done.stderr).splitlines() if f"attempt {pruned_id}" in line]
    assert len(said) == 1, said
    assert f"attempt {pruned_id} finished with this config (5 epochs), but its checkpoints were pruned by " in said[0]
    assert (
        f"not restored; its record stays, as base@{pruned_id}-pruned, and the run continues attempt {continued_id} "
        "from epoch 4 instead" in said[0]
    ), said
    assert "nothing trained" not in log and f"continuing attempt {continued_id} (epochs 1-3) from epoch 4/5" in log
    now = record(workflow)
    assert now["attempt"]["restored"] is False and now["training"]["epochs_completed"] == 5
    assert (run_dir / "checkpoints/last.ckpt").is_file()
    kept = run_dir / "attempts" / f"{pruned_id}-pruned"
    assert json.loads((kept / "provenance.json").read_text())["attempt"]["id"] == pruned_id, "its record stays"
    assert not (run_dir / "attempts" / pruned_id).exists()
    listed = {row["run"] for row in json.loads(snakeddp(workflow, "runs", "--all", "--json"))}
    assert f"base@{pruned_id}-pruned" in listed and "base" in listed, listed
    code, out, err = typed(workflow, "verify", "base")
    assert code == 0, out + err
    assert typed(workflow, "export", "base")[0] == 0
    code, _, err = typed(workflow, "export", f"base@{pruned_id}-pruned")
    assert code == 2 and "HINT: run base is this attempt trained again: `snakeddp export base`." in err, err
    code, out, _ = typed(workflow, "verify", f"base@{pruned_id}-pruned")
    assert code == 0 and "(3 checkpoint(s) pruned, as its pruned.json records)" in out, out
    assert "Nothing to be done" in (lambda done: done.stdout + done.stderr)(workflow.run())


def test_prune_takes_a_run_whose_latest_attempt_failed_and_keeps_the_attempt_that_stands_for_it(workflow, tiny_config):
    """Two finished attempts (model.lr edited between them), then a later one that failed (an AzureML try, prepared
    and ended as its launcher does). Prune passed the run over, its current attempt unfinished, and the first
    attempt's checkpoints stayed for good; it prunes them, and keeps the second's whatever --last says: the run's
    only model, which `snakeddp runs` lists for it."""
    from snakeddp.remote import status as remote_status
    from snakeddp.run import attempt

    run_dir = workflow.directory / "results/runs/base"
    workflow.write_config(tiny_config)
    workflow.run()
    first = record(workflow)["attempt"]["id"]
    edited = copy.deepcopy(tiny_config)
    edited["model"]["lr"] = 0.01
    workflow.write_config(edited)
    workflow.run()
    second = record(workflow)["attempt"]["id"]
    attempt.prepare(run_dir, "f" * 64)
    remote_status.submitted(run_dir, "AzureML job sharp_lamp_42")
    remote_status.ended(run_dir, "failed")

    removed, total = snakeddp(workflow, "prune", "--best", "0", "--last", "0").splitlines()
    assert removed.startswith(f"base@{first}: removed {run_dir / 'attempts' / first / 'checkpoints'} ("), removed
    assert total.startswith("removed the checkpoints of 1 earlier attempt(s), "), total
    assert not (run_dir / "attempts" / first / "checkpoints").exists()
    assert (run_dir / "attempts" / first / "pruned.json").is_file()
    assert (run_dir / "attempts" / second / "checkpoints" / "last.ckpt").is_file(), "the run's only model stays"
    assert snakeddp(workflow, "runs").splitlines()[1].startswith(f"base@{second} "), "listed as the attempt it kept"
    assert typed(workflow, "verify", f"base@{second}")[0] == 0
