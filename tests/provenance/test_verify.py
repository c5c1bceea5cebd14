"""snakeddp verify: passes on untouched outputs, fails on a changed checkpoint, partition or manifest."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from snakeddp.cli import main
from snakeddp.errors import ExportError
from snakeddp.provenance.verify import verify_run
from snakeddp.run.runs import best_checkpoint, resolve_run

pytestmark = pytest.mark.e2e


@pytest.fixture
def results(sweep_workflow, tmp_path) -> Path:
    """A private copy of the sweep's results that a test may damage."""
    copy = tmp_path / "results"
    shutil.copytree(sweep_workflow.directory / "results", copy, ignore=shutil.ignore_patterns("report"))
    return copy


def flip_byte(path: Path, offset: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def verify(results: Path, run: str, capsys) -> tuple[int, str]:
    code = main(["verify", run, "--results", str(results)])
    return code, capsys.readouterr().out


def test_untouched_run_verifies_without_loading_anything(results, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("verify must never load a checkpoint")

    monkeypatch.setattr(torch, "load", refuse)
    code, out = verify(results, "devices-2", capsys)
    assert code == 0, out
    assert "MISMATCH" not in out and "all 11 checks passed" in out
    assert out.count("  ok        checkpoint") == 3 and out.count("partition") == 3


def test_modified_checkpoint_fails(results, capsys):
    record = json.loads((results / "runs/devices-1/provenance.json").read_text())
    best = results / "runs/devices-1" / record["training"]["best_checkpoint"]["path"]
    flip_byte(best, offset=len(best.read_bytes()) // 2)
    code, out = verify(results, "devices-1", capsys)
    assert code == 1
    assert f"MISMATCH  checkpoint  {best}" in out and "provenance says" in out
    (line,) = [line for line in out.splitlines() if "HINT:" in line]
    assert line.startswith("verify: 1 of 11 checks failed: these files are not what run devices-1 recorded. HINT: ")
    # What to do for a checkpoint, and nothing about data files, modules or environments that did not fail.
    hint = line.partition("HINT: ")[2]
    assert hint == (
        "never load a mismatched checkpoint; train the run again with snakemake --profile local --forcerun "
        "results/runs/devices-1/provenance.json, with your --configfile and --config if you gave any (the attempt "
        "with those checkpoints is kept under attempts/, record and all)."
    ), hint


def test_every_run_verified_ends_in_one_line_saying_which_failed_and_what_to_do_once(results, capsys):
    record = json.loads((results / "runs/devices-1/provenance.json").read_text())
    flip_byte(results / "runs/devices-1" / record["training"]["last_checkpoint"]["path"], offset=100)
    part = next((results / "data").glob("*/train/part-00001.safetensors"))
    flip_byte(part)
    code = main(["verify", "--results", str(results)])
    out = capsys.readouterr().out
    assert code == 1
    assert [line for line in out.splitlines() if line.startswith("verify: ")][:2] == [
        "verify: 2 of 11 checks failed: these files are not what run devices-1 recorded.",
        "verify: 1 of 11 checks failed: these files are not what run devices-2 recorded.",
    ], out
    last = out.splitlines()[-1]
    assert last.startswith("verify: 2 of 2 runs do not match their provenance (devices-1, devices-2; "), last
    assert out.count("HINT:") == 1 and "HINT: " in last, "the HINT once, on the last line"
    assert "--forcerun results/runs/devices-1/provenance.json," in last and "devices-2/provenance.json" not in last
    relative = part.relative_to(results.parent).as_posix()
    assert f"rm {relative} && snakemake --profile local {relative}" in last, last


def test_a_run_yaml_rewritten_after_training_fails_naming_the_keys(results, capsys):
    import yaml

    path = results / "runs/devices-1/run.yaml"
    run = yaml.safe_load(path.read_text())
    run["config"]["model"]["lr"] = run["config"]["model"]["lr"] * 10
    path.write_text(yaml.safe_dump(run))
    code, out = verify(results, "devices-1", capsys)
    assert code == 1
    assert f"MISMATCH  run config  {path}  differs from the config it trained at model.lr" in out


def test_modified_partition_fails(results, capsys):
    part = next((results / "data").glob("*/train/part-00001.safetensors"))
    flip_byte(part)
    code, out = verify(results, str(results / "runs/devices-2"), capsys)  # by path this time
    assert code == 1
    assert f"MISMATCH  partition   {part}" in out and "blake3 checksum mismatch" in out


def test_replaced_manifest_and_missing_checkpoint_fail(results):
    run = resolve_run("devices-1", results)
    manifest = run.manifest_path
    manifest.write_text(manifest.read_text().replace('"records"', '"records" '))
    (run.run_dir / "checkpoints/last.ckpt").unlink()
    failed = {(c.kind, Path(c.path).name, c.detail.split(",")[0]) for c in verify_run(run) if not c.ok}
    assert ("checkpoint", "last.ckpt", "missing") in failed
    assert any(kind == "manifest" for kind, _, _ in failed)


def test_installed_entry_point(results):
    snakeddp = Path(sys.executable).with_name("snakeddp")
    done = subprocess.run(
        [str(snakeddp), "--results", str(results), "verify", "devices-1"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([str(snakeddp), "verify", "no-such-run"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "HINT" in done.stderr


def test_an_attempt_pruned_before_pruned_json_existed_reads_as_pruned_and_a_lost_file_still_as_missing(results, capsys):
    """`snakeddp prune` removed an earlier attempt's checkpoints/ whole and wrote nothing (before pruned.json):
    verify said MISMATCH missing for each of its checkpoints, as if they had been lost."""
    from snakeddp.run import attempt

    run_dir = results / "runs" / "devices-1"
    kept_id = json.loads((run_dir / "provenance.json").read_text())["attempt"]["id"]
    attempt.prepare(run_dir, "f" * 64)  # another config's attempt moves this one under attempts/
    kept = run_dir / "attempts" / kept_id
    names = sorted(path.name for path in (kept / "checkpoints").iterdir() if path.suffix == ".ckpt")
    shutil.rmtree(kept / "checkpoints")  # all that prune did then
    code, out = verify(results, f"devices-1@{kept_id}", capsys)
    assert code == 0 and "MISMATCH" not in out, out
    lines = [line for line in out.splitlines() if "  checkpoint  " in line]
    assert sorted(Path(line.split()[2]).name for line in lines) == names, out
    assert all(line.startswith("  pruned    checkpoint") for line in lines), out
    assert lines[0].endswith(
        "pruned, as far as can be told: checkpoints/ is gone whole, with no pruned.json: how `snakeddp prune` left "
        "the attempts it pruned before it recorded them in pruned.json (a folder removed by hand looks the same)"
    ), lines[0]
    assert out.splitlines()[-1].endswith(
        f"run devices-1@{kept_id} matches its provenance (3 checkpoint(s) pruned, as far as can be told: no "
        "pruned.json records it)."
    ), out

    with pytest.raises(ExportError) as refused:  # export, asked for it, says the same before it imports torch
        best_checkpoint(resolve_run(f"devices-1@{kept_id}", results))
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"run devices-1@{kept_id}: its checkpoints were pruned, as far as can be told: "), line
    assert line.count("HINT:") == 1 and "`snakeddp runs --all` lists them" in line, line

    # One file gone from a checkpoints/ still there is no prune of any release: missing, a mismatch.
    other = results / "runs" / "devices-2"
    other_id = json.loads((other / "provenance.json").read_text())["attempt"]["id"]
    attempt.prepare(other, "e" * 64)
    (other / "attempts" / other_id / "checkpoints" / "last.ckpt").unlink()
    code, out = verify(results, f"devices-2@{other_id}", capsys)
    assert code == 1 and "MISMATCH  checkpoint" in out and "last.ckpt  missing" in out, out


def test_an_attempt_whose_data_prune_removed_reads_as_pruned_and_its_data_made_again_as_present(
    results, sweep_workflow, capsys
):
    """`snakeddp prune --data` removed the dataset only an attempt with pruned checkpoints trained on: verify said
    MISMATCH missing for its manifest; it says pruned, keeps the other checks, and checks the dataset made again."""
    import datetime

    run_dir = results / "runs" / "devices-1"
    record = json.loads((run_dir / "provenance.json").read_text())
    # An earlier attempt of the run, kept under attempts/ when the current one trained: devices-1's files, trained on
    # an earlier data config's dataset (the same files, under another dataset id).
    kept_id = "0" * 12
    kept = run_dir / "attempts" / kept_id
    shutil.copytree(run_dir / "checkpoints", kept / "checkpoints")
    shutil.copy(run_dir / "metrics.csv", kept / "metrics.csv")
    dataset = Path(record["data"]["manifest"]).parent.name
    other = f"{dataset.rsplit('-', 1)[0]}-{'0' * 10}"
    shutil.copytree(results / "data" / dataset, results / "data" / other)
    made = results.parent / "made-again"  # what the data rules write again, byte for byte
    shutil.copytree(results / "data" / other, made)
    record["data"] |= {"manifest": record["data"]["manifest"].replace(dataset, other), "dataset": other}
    record.update(origin_sha256="0" * 64, attempt={"id": kept_id, "restored": False})
    (kept / "provenance.json").write_text(json.dumps(record))
    assert main(["prune", "--best", "0", "--last", "0", "--results", str(results)]) == 0
    (line, total) = capsys.readouterr().out.splitlines()  # its checkpoints go, the current attempt's stay
    assert line.startswith(f"devices-1@{kept_id}: removed {kept / 'checkpoints'} (") and " 1 earlier " in total, line
    configfile = str(sweep_workflow.directory / "config.yaml")
    assert main(["prune", "--data", "--configfile", configfile, "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"{other}: removed {results / 'data' / other} (" in out and "in 1 dataset(s)" in out, out
    assert (results / "data" / dataset).is_dir(), "the config's and the current runs' dataset stays"

    code, out = verify(results, f"devices-1@{kept_id}", capsys)
    assert code == 0 and "MISMATCH" not in out, out
    today = datetime.date.today().isoformat()
    (line,) = [line for line in out.splitlines() if "  manifest  " in line]
    said = f"data pruned by `snakeddp prune --data` on {today} ({results / 'data' / 'pruned.json'})"
    assert line.startswith("  pruned    manifest") and line.endswith(said), line
    assert "partition" not in out and "validation" not in out, out
    assert out.count("  pruned    checkpoint") == 3 and "  ok        provenance" in out, out  # the other checks stay
    assert out.splitlines()[-1].endswith(
        f"run devices-1@{kept_id} matches its provenance (3 checkpoint(s) pruned, as its pruned.json records; its "
        f"{said})."
    ), out

    # A config that asks for it again: the data rules make it again, and verify checks it as any dataset.
    made.rename(results / "data" / other)
    code, out = verify(results, f"devices-1@{kept_id}", capsys)
    assert code == 0 and "  ok        manifest" in out and "pruned by `snakeddp prune --data`" not in out, out
    assert out.count("  ok        partition") == 3 and "  ok        validation" in out, out
    (results / "data" / other / "train" / "part-00001.safetensors").unlink()  # and what it misses is missing
    code, out = verify(results, f"devices-1@{kept_id}", capsys)
    assert code == 1 and "MISMATCH  partition" in out, out
