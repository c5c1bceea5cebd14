"""Helpers for tests that start real training processes without Snakemake: data, run.yaml, launch."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import TINY, subprocess_env

from snakeddp import config
from snakeddp.data import sources
from snakeddp.data.generate import write_dataset_manifest, write_synthetic
from snakeddp.run.runfile import RunFile


def merged(base: dict, overrides: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) and key in out else value
    return out


def synthetic_manifest(directory: Path, data: dict[str, Any]) -> Path:
    """Write a synthetic dataset the way the data rules do; return its manifest."""
    params = sources.identity(data)
    (directory / "train").mkdir(parents=True, exist_ok=True)
    entries = []
    for i in range(data["num_train_files"]):
        entry = directory / "train" / f"part-{i:05d}.json"
        write_synthetic(params, "train", i, directory / "train" / f"part-{i:05d}.safetensors", entry)
        entries.append(entry)
    write_synthetic(params, "val", 0, directory / "val.safetensors", directory / "val.json")
    manifest = directory / f"manifest-{len(entries)}.json"
    write_dataset_manifest(manifest, config.dataset_id(data), params, entries, directory / "val.json")
    return manifest


def prepare(tmp_path: Path, overrides: dict, run_id: str = "base") -> tuple[Path, Path | None, Path]:
    """run.yaml, manifest (synthetic data only) and run directory of a TINY-based run under ``tmp_path``."""
    cfg = config.validate(merged(TINY, overrides))
    synthetic = cfg["data"]["source"] == "synthetic"
    manifest = synthetic_manifest(tmp_path / "data", cfg["data"]) if synthetic else None
    run_yaml = tmp_path / "run.yaml"
    RunFile(run_id=run_id, config=config.run_config(cfg)).write(run_yaml)
    return run_yaml, manifest, tmp_path / "runs" / run_id


def launch(
    run_yaml: Path, manifest: Path, run_dir: Path, cwd: Path, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess:
    """``python -m snakeddp.launch`` on the local platform, as the train rule runs it."""
    argv = [sys.executable, "-m", "snakeddp.launch", "--platform", "local", "--config", str(run_yaml)]
    argv += ["--run-dir", str(run_dir), "--data", str(manifest)]
    return subprocess.run(
        argv, cwd=cwd, env=subprocess_env(**env), capture_output=True, text=True, timeout=timeout, check=False
    )
