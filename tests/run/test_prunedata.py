"""snakeddp prune --data: which dataset folders under results/data/ go, what is recorded, and its refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from snakeddp import config as configuration
from snakeddp.cli import main
from snakeddp.run import attempt
from snakeddp.run.layout import RunPaths
from snakeddp.run.prunedata import read_record
from snakeddp.util.hashing import sha256_file
from tests.checkout import Checkout
from tests.helpers import TINY, make_run, tiny_with, write_dataset


def dataset(results: Path, features: int) -> Path:
    """TINY's dataset with ``features`` features, as the data rules write it under ``results``/data/; its manifest."""
    data = configuration.validate(tiny_with({"data": {"num_features": features}}))["data"]
    return write_dataset(results / "data" / configuration.dataset_id(data), data)


def finished(folder: Path, manifest: Path, finished_at: str, checkpoint: bool = True) -> Path:
    """A finished attempt's record in ``folder`` that trained on ``manifest``, with its last.ckpt unless not."""
    folder.mkdir(parents=True, exist_ok=True)
    if checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"x" * 10)
    record = {
        "run_id": folder.parent.parent.name if folder.parent.name == "attempts" else folder.name,
        "origin_sha256": folder.name[:1] * 64,
        "attempt": {"id": folder.name},
        "timing": {"finished_at": finished_at},
        "training": {"best_val_loss": 0.5, "last_checkpoint": {"path": "checkpoints/last.ckpt", "sha256": "0" * 64}},
        "data": {
            "manifest": manifest.relative_to(manifest.parents[3]).as_posix(),  # as the workflow gives it: results/...
            "manifest_sha256": sha256_file(manifest),
            "dataset": manifest.parent.name,
        },
    }
    (folder / "provenance.json").write_text(json.dumps(record))
    return folder


@pytest.fixture
def workspace(tmp_path):
    """A checkout's results after a few configs: the config's dataset, a history run's, the next run's, a
    restorable attempt's, a pruned attempt's and one nothing names."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(TINY))
    results = tmp_path / "results"
    _, planned = make_run(tmp_path, TINY, "base")
    finished(results / "runs" / "base", planned, "2026-01-04T00:00:00")
    # A finished run of an earlier sweep (history): its current attempt trained on a dataset the config no longer plans.
    history = dataset(results, 9)
    finished(results / "runs" / "old", history, "2026-01-01T00:00:00")
    # A run whose run.yaml was written for the next invocation, not trained yet.
    _, upcoming = make_run(tmp_path, tiny_with({"data": {"num_features": 12}}), "next")
    # Two earlier attempts of base: one whose checkpoints are there (restorable), one whose checkpoints prune removed.
    restorable = dataset(results, 10)
    finished(results / "runs" / "base" / "attempts" / "a1", restorable, "2026-01-03T00:00:00")
    gone = dataset(results, 11)
    finished(results / "runs" / "base" / "attempts" / "b1", gone, "2026-01-02T00:00:00")
    assert main(["prune", "base", "--best", "0", "--last", "1", "--results", str(results)]) == 0
    assert not (results / "runs" / "base" / "attempts" / "b1" / "checkpoints").exists()
    unused = dataset(results, 13)
    return results, {
        "planned": planned,
        "history": history,
        "upcoming": upcoming,
        "restorable": restorable,
        "gone": gone,
        "unused": unused,
    }


def size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_removes_exactly_the_datasets_nothing_needs_and_records_them_first(workspace, capsys):
    results, manifests = workspace
    folders = {key: manifest.parent for key, manifest in manifests.items()}
    capsys.readouterr()

    assert main(["prune", "--data", "--dry-run", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert all(folder.is_dir() for folder in folders.values()), "a dry run removes nothing"
    assert not (results / "data" / "pruned.json").exists(), "a dry run writes nothing"
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == sorted([folders["gone"].name, folders["unused"].name]), out
    assert lines[0].startswith(f"{lines[0].split(':')[0]}: would remove {results / 'data'}/"), out
    assert lines[-1].startswith("would free ") and " in 2 dataset(s); kept 4: planned by the config" in lines[-1], out

    sizes = {key: size(folder) for key, folder in folders.items()}
    digests = {key: sha256_file(manifest) for key, manifest in manifests.items()}
    assert main(["prune", "--data", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert {key for key, folder in folders.items() if not folder.exists()} == {"gone", "unused"}, out
    for key in ("gone", "unused"):
        (line,) = [line for line in out.splitlines() if line.startswith(f"{folders[key].name}:")]
        assert line == f"{folders[key].name}: removed {folders[key]} ({sizes[key] / 1000:.1f} kB)", line
    total = (sizes["gone"] + sizes["unused"]) / 1000
    record = results / "data" / "pruned.json"
    assert out.splitlines()[-1].startswith(f"freed {total:.1f} kB in 2 dataset(s) (recorded in {record}); kept 4"), out

    entries = read_record(record)  # schema-checked
    assert [entry["name"] for entry in entries] == sorted([folders["gone"].name, folders["unused"].name])
    for entry in entries:
        key = "gone" if entry["name"] == folders["gone"].name else "unused"
        assert entry["manifests"] == [{"file": "manifest-3.json", "sha256": digests[key]}]
        assert entry["bytes"] == sizes[key] and entry["command"] == "snakeddp prune --data", entry

    # Nothing left to remove: the same command frees nothing and keeps the record.
    assert main(["prune", "--data", "--results", str(results)]) == 0
    assert capsys.readouterr().out.startswith("freed 0 B in 0 dataset(s); kept 4")
    assert len(read_record(record)) == 2


def test_what_it_refuses_says_what_to_do_and_doing_it_works(workspace, capsys):
    results, manifests = workspace
    capsys.readouterr()

    def refused(*argv: str) -> str:
        assert main([*argv, "--results", str(results)]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("snakeddp prune: ") and line.count("HINT:") == 1, line
        return line

    # Datasets and checkpoints are pruned by two commands: the HINT's, one after the other.
    line = refused("prune", "--data", "--best", "0")
    assert "(snakeddp prune --best N --last N), then" in line and "(snakeddp prune --data)" in line, line
    assert main(["prune", "--best", "0", "--last", "0", "--results", str(results)]) == 0
    assert "removed the checkpoints of 1 earlier attempt(s)" in capsys.readouterr().out
    # The attempt that kept its checkpoints no longer does: its data goes too.
    line = refused("prune", "--configfile", "config/config.yaml")
    assert line.endswith("HINT: leave them out, or add --data to prune datasets."), line
    pruned_json = results / "data" / "pruned.json"
    pruned_json.write_text("{}")  # not what prune --data writes
    line = refused("prune", "--data")
    assert line.endswith(
        f"HINT: move it aside (mv {pruned_json} {pruned_json}.bad) and run `snakeddp prune --data` again: `snakeddp "
        "verify` then tells the datasets it named only as missing."
    ), line
    shutil.move(pruned_json, f"{pruned_json}.bad")
    assert main(["prune", "--data", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "in 3 dataset(s)" in out and not manifests["restorable"].parent.exists(), out

    # Without a config, what is planned is not known.
    (results.parent / "config" / "config.yaml").rename(results.parent / "sweep.yaml")
    line = refused("prune", "--data", "--dry-run")
    assert line.endswith("HINT: give the --configfile and --config you gave snakemake (snakeddp prune --data "
                         "--configfile FILE)."), line  # fmt: skip
    configfile = str(results.parent / "sweep.yaml")
    assert main(["prune", "--data", "--dry-run", "--configfile", configfile, "--results", str(results)]) == 0
    assert capsys.readouterr().out == (
        "would free 0 B in 0 dataset(s); kept 3: planned by the config, or trained on by a run or an attempt whose "
        "checkpoints stay\n"
    )
    # Another config's flags plan another dataset: the one this config planned is still the current run's.
    other = ["--config", "data={num_features: 14}"]
    assert main(["prune", "--data", "--dry-run", "--configfile", configfile, *other, "--results", str(results)]) == 0
    assert capsys.readouterr().out.startswith("would free 0 B in 0 dataset(s); kept 3")


def test_a_workflow_that_holds_its_locks_stops_it_and_the_hints_unlock_lets_it_run(tmp_path, capsys):
    """A workflow running (or killed) in the directory may be making a dataset of another config, which would look
    unneeded: its Snakemake lock files (as Snakemake writes them) refuse --data; `snakemake --unlock` removes them."""
    (tmp_path / "wf").mkdir()
    checkout = Checkout(tmp_path / "wf")
    results = checkout.root / "results"
    locks = checkout.root / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text(f"{checkout.root / 'config' / 'config.yaml'}\n")
    (locks / "0.output.lock").write_text(f"{results / 'data'}\n")
    capsys.readouterr()
    assert main(["prune", "--data", "--results", str(results)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"snakeddp prune: --data: a workflow holds {locks} (2 lock files): it runs, or was killed"
    ), line
    assert line.endswith("if none runs, `snakemake --unlock` in that directory first."), line
    # The dry run only says: it runs beside a workflow.
    assert main(["prune", "--data", "--dry-run", "--results", str(results)]) == 0
    assert capsys.readouterr().out.startswith("would free 0 B in 0 dataset(s)")
    unlocked = checkout.snakemake("--unlock")
    assert unlocked.returncode == 0, unlocked.stdout
    assert main(["prune", "--data", "--results", str(results)]) == 0
    assert capsys.readouterr().out.startswith("freed 0 B in 0 dataset(s)")


def test_an_unfinished_attempt_set_aside_with_its_last_checkpoint_keeps_the_dataset_it_resumes_on(tmp_path, capsys):
    """Attempts as the launcher prepares them (run.attempt.prepare, with the run's dataset id): one interrupted after
    an epoch, then set aside by another config's attempt, which is set aside in turn before it saved anything."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(TINY))
    results = tmp_path / "results"
    run_dir = results / "runs" / "base"
    run_dir.mkdir(parents=True)
    resumable, unsaved, current = (dataset(results, features).parent for features in (10, 11, 12))
    attempt.prepare(run_dir, "k1", resumable.name)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x" * 10)
    attempt.prepare(run_dir, "k2", unsaved.name)
    attempt.prepare(run_dir, "k3", current.name)
    kept = RunPaths(run_dir).kept_unfinished()
    assert sorted(json.loads(paths.state.read_text())["dataset"] for paths in kept) == [resumable.name, unsaved.name]

    assert main(["prune", "--data", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    # The current attempt's dataset goes too: no run.yaml names it here, and it has nothing saved.
    assert (resumable.is_dir(), unsaved.exists(), current.exists()) == (True, False, False), out
    # Its config back, the kept attempt resumes from its last.ckpt, on the dataset prune kept.
    assert attempt.prepare(run_dir, "k1", resumable.name) == run_dir / "checkpoints" / "last.ckpt"
