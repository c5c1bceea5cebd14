"""A run directory trained through ``python -m snakeddp.launch`` as the train rule does, watched
while it trains: shared by tests/e2e/test_training.py (CPU) and tests/gpu/ (CUDA)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from snakeddp import config
from snakeddp.data.generate import write_dataset_manifest, write_synthetic
from snakeddp.run.runfile import RunFile
from snakeddp.util import handoff
from tests.helpers import as_the_train_rule, subprocess_env


def make_dataset(root: Path, data: dict) -> Path:
    params = {k: v for k, v in data.items() if k != "num_train_files"}
    entries = []
    for i in range(data["num_train_files"]):
        write_synthetic(params, "train", i, root / f"train/part-{i:05d}.safetensors", root / f"train/part-{i:05d}.json")
        entries.append(root / f"train/part-{i:05d}.json")
    write_synthetic(params, "val", 0, root / "val.safetensors", root / "val.json")
    manifest = root / f"manifest-{data['num_train_files']}.json"
    write_dataset_manifest(manifest, config.dataset_id(data), params, entries, root / "val.json")
    return manifest


class Run:
    """One run directory trained through `python -m snakeddp.launch`, as the train rule does."""

    def __init__(self, tmp_path: Path, overrides: dict) -> None:
        cfg = config.validate(overrides)
        ((run_id, run),) = config.expand_sweep(cfg).items()
        self.config = run["config"]
        self.manifest = make_dataset(tmp_path / "data", self.config["data"])
        self.dir = tmp_path / "runs" / run_id
        self.dir.mkdir(parents=True)
        self.run_file = self.dir / "run.yaml"
        RunFile(run_id=run_id, config=self.config).write(self.run_file)
        self.log = tmp_path / "train.log"
        self.env: dict[str, str] = {}

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "snakeddp.launch",
            "--platform",
            "local",
            "--config",
            str(self.run_file),
            "--run-dir",
            str(self.dir),
            "--data",
            str(self.manifest),
        ]

    def start(self, kept_warm: bool = False) -> subprocess.Popen:
        """The launcher, started as typed; handed to a warm process a test file keeps (kept_warm) only when asked:
        tests stop or kill the launcher to see what goes with it, and a kept process's jobs are not its children.
        Asked, it starts as the train rule would, in the workflows' venv with their jobs' import path: the kept
        process's (tests.workflow_venv), which declines any other (a run resumed there must have started there)."""
        handle = self.log.open("a")
        env = {k: v for k, v in subprocess_env(**self.env).items() if k != handoff.SOCKET or kept_warm or k in self.env}
        argv = self.argv()
        if kept_warm:
            argv[0], env["PYTHONPATH"] = as_the_train_rule(env)
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def train(self, kept_warm: bool = False) -> int:
        """Trained to the end; ``kept_warm``: a run no test signals, forked from the file's kept warm process."""
        return self.start(kept_warm).wait(timeout=600)

    def metrics(self) -> list[dict]:
        import csv

        path = self.dir / "metrics.csv"
        if not path.exists():
            return []
        with path.open() as handle:
            return list(csv.DictReader(handle))

    def wait_for_epochs(self, process: subprocess.Popen, epochs: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        # And last.ckpt: Lightning moves checkpoint callbacks last, so an epoch's metrics row is written
        # a moment before its checkpoint; a kill in that moment leaves nothing to resume from.
        while len(self.metrics()) < epochs or not (self.dir / "checkpoints" / "last.ckpt").is_file():
            assert process.poll() is None, f"training ended early:\n{self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "training too slow"
            time.sleep(0.1)

    def traces(self) -> list[dict]:
        return [
            json.loads(line)
            for path in sorted((self.dir / "trace").glob("rank-*.jsonl"))
            for line in path.read_text().splitlines()
        ]

    def partition_ids(self, index: int) -> set[int]:
        n = self.config["data"]["num_records_per_train_file"]
        return set(range(index * n, (index + 1) * n))


# Records per partition for tests that signal a run after its first epoch: the epochs left must
# outlast the ranks' one-second preemption agreement (callbacks.Preemption.CHECK_EVERY_S) by far,
# or a fast machine finishes the run before the ranks agree to stop.
SIGNALLED_RECORDS = 18001


def slow_config(records: int = 6001, **trainer) -> dict:
    """Enough steps per epoch that a signal lands mid-epoch."""
    return {
        "data": {
            "num_train_files": 3,
            "num_records_per_train_file": records,
            "num_val_records": 500,
            "num_features": 16,
        },
        "model": {"hidden_sizes": [32]},
        "trainer": {
            "max_epochs": 5,
            "batch_size": 16,
            "trace_samples": True,
            "early_stopping": {"enabled": False},
            **trainer,
        },
        "launch": {"devices": 2},
    }
