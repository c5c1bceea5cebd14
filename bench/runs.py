"""Start training runs the two ways being compared, and watch their processes' memory.

Ours: ``python -m snakeddp.launch --platform local`` (snakeddp's supervisor -> ``snakeddp.train``
on every rank), exactly what the workflow's train rule runs. The baseline: torchrun starting
``bench.baselines.handwritten_ddp``. Both get one thread per process.
"""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.harness import child_env
from snakeddp import config as configuration
from snakeddp.run.runfile import RunFile
from snakeddp.warm.process import SOCKET, WarmProcess

WORKER_MODULES = ("snakeddp.train", "bench.baselines.handwritten_ddp")
SUPERVISOR = "snakeddp.cluster.supervisor"
LAUNCHER_MODULES = ("torch.distributed.run", "snakeddp.launch", "snakeddp.cluster.supervisor", "snakeddp.cluster.agent")


def run_file(
    data: dict[str, Any],
    hidden: list[int],
    epochs: int,
    batch_size: int,
    devices: int,
    precision: str = "32-true",
    **launch: Any,
) -> RunFile:
    """One run's config: no early stopping (every run trains all epochs), one thread per process; ``launch``:
    more of its launch section (accelerator, hang_timeout)."""
    trainer = {"max_epochs": epochs, "batch_size": batch_size, "early_stopping": {"enabled": False}}
    cfg = configuration.validate(
        {
            "data": data,
            "model": {"name": "mlp" if hidden else "linear", "hidden_sizes": hidden, "optimizer": "adam"},
            "trainer": {**trainer, "precision": precision},
            "launch": {"devices": devices, "threads_per_process": 1, **launch},
        }
    )
    return RunFile(run_id="bench", config=configuration.run_config(cfg))


@dataclass
class MemoryTrace:
    """RSS of each training process, sampled while it runs, and the kernel's peak (VmHWM)."""

    samples: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    hwm: dict[int, int] = field(default_factory=dict)
    #: Seconds between samples (each lists the run's processes and reads theirs: 8 s of CPU in a tiny memory
    #: benchmark at 0.02 s on this machine).
    period: float = 0.02

    def peak(self, pid: int) -> int:
        sampled = max((rss for _, rss in self.samples.get(pid, [])), default=0)
        return max(sampled, self.hwm.get(pid, 0))


def _is_worker(process: psutil.Process) -> bool:
    try:
        argv = process.cmdline()
        line = " ".join(argv)
        if SUPERVISOR in argv:
            # A rank forked by the supervisor shows the supervisor's command line (what exec() set):
            # it is the supervisor's child with the same one.
            return process.parent().cmdline() == argv
    except (psutil.Error, AttributeError):  # gone, or its parent is
        return False
    return any(m in line for m in WORKER_MODULES) and not any(m in line for m in LAUNCHER_MODULES)


def _hwm(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _watch(root: subprocess.Popen, trace: MemoryTrace, period: float, stop: threading.Event) -> None:
    start = time.perf_counter()
    parent = psutil.Process(root.pid)
    while not stop.is_set():
        try:
            children = parent.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if not _is_worker(child):
                continue
            try:
                rss = child.memory_info().rss
            except psutil.Error:
                continue
            trace.samples.setdefault(child.pid, []).append((time.perf_counter() - start, rss))
            hwm = _hwm(child.pid)
            if hwm is not None:
                trace.hwm[child.pid] = hwm
        stop.wait(period)


def start(
    argv: list[str],
    log: Path,
    trace: MemoryTrace | None = None,
    env: dict[str, str] | None = None,
) -> float:
    """Run ``argv`` to completion (raising on failure); return its wall time. ``trace`` records memory."""
    begin = time.perf_counter()
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env or child_env())
        stop = threading.Event()
        watcher = None
        if trace is not None:
            watcher = threading.Thread(target=_watch, args=(process, trace, trace.period, stop), daemon=True)
            watcher.start()
        code = process.wait()
        stop.set()
        if watcher is not None:
            watcher.join()
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({code}); log {log}:\n{log.read_text(encoding='utf-8')[-4000:]}")
    return time.perf_counter() - begin


def ours(
    run: RunFile, manifest: Path, run_dir: Path, trace: MemoryTrace | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Train with snakeddp (launch -> supervisor -> snakeddp.train); per-epoch rows from metrics.csv.
    ``env``: the jobs' environment (``warm_jobs``'s: forked by a warm process), else a cold start."""
    run_dir.mkdir(parents=True)
    run.write(run_dir / "run.yaml")
    argv = [sys.executable, "-m", "snakeddp.launch", "--platform", "local", "--config", str(run_dir / "run.yaml")]
    argv += ["--run-dir", str(run_dir), "--data", str(manifest)]
    return measured(run_dir, start(argv, run_dir / "launch.log", trace, env=env))


def measured(run_dir: Path, wall: float) -> dict[str, Any]:
    """A finished run of ours: per-epoch rows from metrics.csv, rank 0's phases and its fixed cost."""
    with (run_dir / "metrics.csv").open() as handle:
        rows = [
            {"samples": int(r["samples"]), "wait_s": float(r["data_wait_s"]), "train_s": float(r["train_seconds"])}
            for r in csv.DictReader(handle)
        ]
    phases = json.loads((run_dir / "provenance.json").read_text())["timing"]["phases"]
    work = phases["total_s"] - phases["startup_s"] - phases["teardown_s"]
    # fixed_s: launch to the first step plus the end of the last epoch to exit.
    return {"wall_s": wall, "rows": rows, "fixed_s": wall - work, "phases": phases}


@contextlib.contextmanager
def warm_jobs(preload: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
    """The environment of a local workflow's jobs: a warm process started as the Snakefile's onstart
    starts it (snakeddp.warm), waited for until it has imported everything it preloads, forks every
    `python -m snakeddp.launch` started with this environment. ``preload``: what the invocation's jobs
    import (snakeddp.warm.preload.for_rules, as the Snakefile gives it), by default what every step imports."""
    process = WarmProcess()
    env = child_env()
    env[SOCKET] = process.start(env, preload=preload)
    try:
        if not process.imported(timeout=300):
            raise RuntimeError("the warm process did not finish its imports in 300 s")
        yield env
    finally:
        process.close()


def handwritten(
    run: RunFile,
    manifest: Path,
    run_dir: Path,
    fmt: str = "safetensors",
    trace: MemoryTrace | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Train with the hand-written DDP loop under torchrun; per-epoch rows from its JSON."""
    run_dir.mkdir(parents=True)
    cfg = run.config
    hidden = cfg["model"]["hidden_sizes"] if cfg["model"]["name"] == "mlp" else []
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={cfg['launch']['devices']}"]
    argv += ["--max-restarts=0", "--standalone", "-m", "bench.baselines.handwritten_ddp", "--manifest", str(manifest)]
    argv += ["--epochs", str(cfg["trainer"]["max_epochs"]), "--batch-size", str(cfg["trainer"]["batch_size"])]
    argv += ["--lr", str(cfg["model"]["lr"]), "--format", fmt, "--hidden", *map(str, hidden)]
    argv += ["--checkpoint", str(run_dir / "last.pt"), "--out", str(run_dir / "timings.json")]
    if cfg["launch"]["accelerator"] == "gpu":
        argv += ["--device", "cuda", "--precision", cfg["trainer"]["precision"]]
    wall = start(argv, run_dir / "train.log", trace, env=env)
    epochs = json.loads((run_dir / "timings.json").read_text())
    rows = [{"samples": r["samples"], "wait_s": r["load_s"], "train_s": r["train_s"]} for r in epochs]
    # The first step comes after the first partition's load, as in ours (phases.startup_s).
    work = sum(r["epoch_s"] for r in epochs) - epochs[0]["load_s"]
    return {"wall_s": wall, "rows": rows, "fixed_s": wall - work}


def profiled_ours(run: RunFile, manifest: Path, run_dir: Path) -> Path:
    """Train with snakeddp's own launch command, each rank under cProfile; return rank 0's stats file."""
    from snakeddp import launch

    run_dir.mkdir(parents=True)
    run.write(run_dir / "run.yaml")
    args = launch.parse_args(
        ["--config", str(run_dir / "run.yaml"), "--run-dir", str(run_dir), "--data", str(manifest)]
    )
    _, argv, env = launch.build(args, child_env())
    entry = argv.index("snakeddp.train")
    argv[entry : entry + 1] = ["bench.profiled", str(run_dir / "profile"), "snakeddp.train"]
    with (run_dir / "launch.log").open("w") as output:
        subprocess.run(argv, stdout=output, stderr=subprocess.STDOUT, env=env, check=True)
    return run_dir / "profile" / "rank-0.prof"


def samples_per_s(out: dict[str, Any]) -> float:
    """Samples over training time including the wait for each epoch's partition (validation excluded)."""
    rows = out["rows"]
    return sum(r["samples"] for r in rows) / sum(r["train_s"] + r["wait_s"] for r in rows)
