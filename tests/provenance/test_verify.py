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
from snakeddp.provenance.verify import verify_run
from snakeddp.run.runs import resolve_run

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
    assert "1 of 11 checks failed" in out and "HINT" in out


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
