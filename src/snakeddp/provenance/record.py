"""What a run was made from, written by rank 0 of the run itself when training ends.

Nothing here is reconstructed afterwards: the code commit, environment and hosts are read by
the process that trained, and the checkpoint hashes from the files it wrote. Secret-looking
variables and URL credentials never reach the record (see ``redact``).
"""

from __future__ import annotations

import getpass
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from snakeddp import __version__, platforms
from snakeddp.config import parts
from snakeddp.config.network import is_network_variable
from snakeddp.environment.capture import accelerator_and_backend, accelerator_stack
from snakeddp.environment.lock import installed
from snakeddp.run import account, tries, variables
from snakeddp.run.attempt import attempt_id, inherited_epochs, no_lock_warning
from snakeddp.run.layout import RunPaths
from snakeddp.run.runs import logged_metrics
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_file, sha256_json
from snakeddp.util.redact import environment_secrets, recorded_environment, scrub, secret_values

if TYPE_CHECKING:
    from snakeddp.cluster import Layout
    from snakeddp.run.runfile import RunFile

PROVENANCE_FORMAT = "snakeddp-provenance/1"


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_info(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The commit of the code that ran. Platforms that ship code without .git (AzureML) pass it
    in SNAKEDDP_CODE_COMMIT / SNAKEDDP_CODE_DIRTY, captured by the submitter from its checkout."""
    if env.get(variables.CODE_COMMIT):
        return {
            "commit": env[variables.CODE_COMMIT],
            "dirty": env.get(variables.CODE_DIRTY) == "1",
            "source": "submitter",
            "snakeddp_version": __version__,
        }
    here = Path(__file__).resolve().parent
    commit = _git(["rev-parse", "HEAD"], here)
    status = _git(["status", "--porcelain", "--untracked-files=no"], here) if commit else None
    return {
        "commit": commit,
        "dirty": bool(status) if commit else None,
        "source": "git" if commit else None,
        "snakeddp_version": __version__,
    }


def versions() -> dict[str, Any]:
    """The interpreter and the accelerator stack this process runs on."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "executable": sys.executable,
        **accelerator_stack(),
    }


def installed_packages() -> dict[str, str]:
    """Every distribution this interpreter can import, by canonical name."""
    return {name: pin.version for name, pin in installed(sys.path).items()}


def environment_info(record_path: Path | None) -> dict[str, Any]:
    """Versions of what ran, plus the hash of the captured stage environment when there is one."""
    info = {**versions(), "packages": installed_packages()}
    info["packages_sha256"] = sha256_json(info["packages"])
    if record_path is not None and record_path.is_file():
        record = read_json(record_path)
        info["record"] = str(record_path)
        info["environment_hash"] = record.get("hash")
        info["lock_sha256"] = record.get("lock_sha256")
    else:
        info["record"], info["environment_hash"], info["lock_sha256"] = None, None, None
    return info


def file_record(path: Path | str | None, run_dir: Path) -> dict[str, Any] | None:
    if not path:
        return None
    path = Path(path)
    if not path.is_file():
        return None
    try:
        shown = str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        shown = str(path)
    return {"path": shown, "sha256": sha256_file(path), "bytes": path.stat().st_size}


def cluster_variables(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables provenance records: the launchers' and every platform's (an allow-list), and the network's."""
    recorded = platforms.recorded_names()
    return recorded_environment(env, also=lambda name: name in recorded or is_network_variable(name))


def rank_start(ranks: list[dict[str, Any]]) -> str:
    """warm (every rank forked from one process per node), cold (each a process of its own) or mixed."""
    starts = {r.get("start", "cold") for r in ranks}
    return starts.pop() if len(starts) == 1 else "mixed"


def checkpoint_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every checkpoint kept in the run's checkpoints/ (top-k and last), hashed."""
    return [file_record(path, run_dir) for path in RunPaths(run_dir).checkpoint_files()]


def _value(text: Any) -> float | None:
    """A metrics.csv cell as a number; empty cells and NaN (an epoch that diverged) rank nowhere."""
    if text in (None, ""):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def ranking(rows: list[dict[str, Any]], monitor: Mapping[str, str]) -> dict[str, Any]:
    """The training section's verdict from metrics.csv: the best epoch by the monitored metric, its
    score, and every metric the model logged at that epoch (best_val_loss and best_val_acc among them,
    null when the model logs no such metric)."""
    metric = monitor["metric"]
    scored = [row for row in rows if _value(row.get(metric)) is not None]
    pick = min if monitor["mode"] == "min" else max
    best = pick(scored, key=lambda row: _value(row[metric])) if scored else None
    at_best = {name: _value(best.get(name)) for name in logged_metrics(rows)} if best else {}
    return {
        "monitor": dict(monitor),
        "best_epoch": int(best["epoch"]) if best else None,
        "best_score": at_best.get(metric),
        "best_metrics": at_best,
        "best_val_loss": at_best.get("val_loss"),
        "best_val_acc": at_best.get("val_acc"),
    }


def counted(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the DataModule yielded, as training counted it (all ranks): per epoch of training, and in
    one validation. Per epoch is the first epoch's count (a DataModule may change it later)."""
    if not rows or rows[0].get("batches") in (None, ""):
        return None
    first = rows[0]
    validated = next((row for row in rows if row.get("val_batches") not in (None, "")), None)
    return {
        "train_samples_per_epoch": int(first["samples"]),
        "train_batches_per_epoch": int(first["batches"]),
        "val_samples": int(validated["val_samples"]) if validated else None,
        "val_batches": int(validated["val_batches"]) if validated else None,
    }


def epochs_from(run_dir: Path, key: str, epochs: int) -> list[dict[str, Any]]:
    """Which attempt trained which epochs (1-based): those this attempt took over from the finished
    attempt of a shorter budget it continues (run-state.json), then its own."""
    inherited = inherited_epochs(run_dir)
    taken = inherited[-1]["last_epoch"] if inherited else 0
    own = [{"attempt": attempt_id(key), "first_epoch": taken + 1, "last_epoch": epochs}] if epochs > taken else []
    return inherited + own


def tries_so_far(
    run_dir: Path, launcher: str, job_id: str | None, env: Mapping[str, str], gpus: int = 0
) -> list[dict[str, Any]]:
    """The attempt's tries as tries.json holds them, and this one, which completes now (its launcher adds it to
    tries.json once its ranks are gone): from when snakeddp.launch started it (TRY_STARTED; a rank started
    by hand, from this process's start), with its account so far (rank 0's last post: run.account)."""
    earlier = tries.read(run_dir)
    started = float(env.get(variables.TRY_STARTED) or psutil.Process().create_time())
    ended = time.time()
    # The last checkpoint an earlier try saved is the one this try resumed from.
    resumed = next((t["kept_step"] for t in reversed(earlier) if t["kept_step"] is not None), None)
    current = tries.entry(
        started=started,
        ended=ended,
        outcome="completed",
        exit_code=0,
        launcher=launcher,
        job_id=job_id,
        resumed_from={"step": resumed} if resumed is not None else None,
        saved_now=tries.saved(run_dir),
        hang=None,
        account=account.of_try_here(run_dir, ended - started, "completed", gpus),
    )
    return [*earlier, {**current, "number": len(earlier) + 1}]


def user() -> str | None:
    """The operating-system user the run ran as (the agent of the run), or None in a nameless container."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def write(run_dir: Path, record: dict[str, Any]) -> Path:
    # Package names are not variable names: google-auth's version is no credential. Their versions
    # still pass through scrub's text masking like every other value, against the environment's credentials
    # found once (scrub finds them itself when not given: 35 ms of a rank's CPU over 262 packages).
    record = {"format": PROVENANCE_FORMAT, **record}
    packages = None
    if isinstance(record.get("environment"), dict):
        environment = dict(record["environment"])
        packages = environment.pop("packages", None)
        record["environment"] = environment
    scrubbed = scrub(record)
    if isinstance(packages, dict):
        credentials = environment_secrets()
        scrubbed["environment"]["packages"] = {
            name: scrub(version, secret_values(version) | credentials) for name, version in packages.items()
        }
    return atomic_write_json(RunPaths(run_dir).provenance, scrubbed)


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run as it starts: what it is made from and what it resumes."""

    run: RunFile
    run_dir: Path
    manifest: Path
    """The dataset's manifest.json (for data.source module, its stand-in record)."""
    manifest_sha256: str
    environment_record: Path | None
    """results/envs/<stage>.json of the environment in use, when the workflow gave one."""
    key: str
    """The attempt key (``run.attempt.attempt_key``): provenance's origin_sha256."""
    resume_from: Path | None
    locked: bool
    """Whether the run directory's lock is held (False where its file system has no flock)."""
    resumed_record: dict[str, Any] | None = None
    """``resume_from`` as it was read (``file_record``): last.ckpt is overwritten before provenance is written."""


@dataclass(frozen=True)
class Outcome:
    """What fitting produced, as the training callbacks saw it (``training.trainer.Callbacks.outcome``)."""

    started_at: str
    seconds: float
    world_size: int
    metrics: list[dict[str, Any]]
    """metrics.csv's rows, one per epoch the final model went through."""
    best_checkpoint: str
    best_score: float | None
    last_checkpoint: str
    stopped_early: bool
    ranks: list[dict[str, Any]]
    phases: Callable[[], dict[str, float]]
    """timing.phases, read last: teardown_s and total_s include building the record."""
    diverged: bool = False
    """The monitored metric went NaN or infinite, and training stopped there (``MonitoredMetric``)."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def build(
    attempt: Attempt,
    layout: Layout,
    outcome: Outcome,
    *,
    data: dict[str, Any],
    user_code: list[dict[str, Any]],
    tracking: dict[str, Any] | None,
) -> dict[str, Any]:
    """Everything provenance.json says, from the objects that did the work (rank 0, after fit).

    ``data``: the data section (``data.custom.describe``); ``user_code``: the user's classes
    (``config.targets.user_code``); ``tracking``: where the trackers logged (``Trackers.describe``).
    """
    cfg, run_dir, rows = attempt.run.config, attempt.run_dir, outcome.metrics
    train_seconds = sum(float(r["train_seconds"]) for r in rows)
    samples = sum(int(r["samples"]) for r in rows)
    accelerator, backend = accelerator_and_backend(variables.accelerator(parts.Launch.of(cfg["launch"]), os.environ))
    trainer_cfg = parts.Trainer.of(cfg["trainer"])
    monitor = trainer_cfg.monitor
    best = file_record(outcome.best_checkpoint, run_dir)
    if best is not None:
        best.update(metric=monitor.metric, score=outcome.best_score)
    data = {**data, "counted": counted(rows)}
    gpus = outcome.world_size if accelerator == "gpu" else 0
    attempt_tries = tries_so_far(run_dir, layout.launcher, layout.job_id, os.environ, gpus)
    record = {
        "run_id": attempt.run.run_id,
        "sweep_point": attempt.run.point,
        "status": "diverged" if outcome.diverged else "early_stopped" if outcome.stopped_early else "completed",
        "config": cfg,
        "config_sha256": sha256_json(cfg),
        "origin_sha256": attempt.key,
        "attempt": {"id": attempt_id(attempt.key), "restored": False, "tries": attempt_tries},
        "code": code_info(),
        "data": data,
        "environment": environment_info(attempt.environment_record),
        "launch": _launch(layout, outcome, trainer_cfg.strategy, backend, accelerator),
        "timing": {
            "started_at": outcome.started_at,
            "finished_at": utc_now(),
            "duration_s": round(outcome.seconds, 3),
            "train_seconds": round(train_seconds, 3),
            "samples_trained": samples,
            "samples_per_s": round(samples / train_seconds, 3) if train_seconds else None,
            "goodput": tries.goodput(attempt_tries),
        },
        "training": _training(attempt, outcome, trainer_cfg, best, deterministic=accelerator == "cpu"),
        "tracking": tracking,
        "user_code": user_code,
    }
    # What the platform the ranks ran on says of the run, under its name (a Spark application's executors).
    record["launch"].update(platforms.launch_records(os.environ, outcome.ranks))
    if not attempt.locked:  # the launcher printed it; the record keeps it with the run
        record["warnings"] = [no_lock_warning(run_dir)]
    record["timing"]["phases"] = outcome.phases()
    return record


def _launch(layout: Layout, outcome: Outcome, strategy: str, backend: str, accelerator: str) -> dict[str, Any]:
    """How the run's processes were started and where they ran, as the launcher and the ranks saw it."""
    return {
        "launcher": layout.launcher,
        "strategy": strategy,
        "backend": backend,
        "accelerator": accelerator,
        "nodes": layout.num_nodes,
        "processes_per_node": layout.local_world_size,
        "world_size": outcome.world_size,
        "master_addr": layout.master_addr,
        "master_port": layout.master_port,
        "job_id": layout.job_id,
        "ranks": outcome.ranks,
        "hosts": sorted({r["host"] for r in outcome.ranks}),
        "nodes_seen": sorted({r["node"] or r["host"] for r in outcome.ranks}),
        "command": os.environ.get(variables.LAUNCH_COMMAND),
        "rank_start": rank_start(outcome.ranks),
        "job_start": os.environ.get(variables.JOB_START, "cold"),
        "variables": cluster_variables(),
        "user": user(),
    }


def _training(
    attempt: Attempt, outcome: Outcome, trainer_cfg: parts.Trainer, best: dict[str, Any] | None, *, deterministic: bool
) -> dict[str, Any]:
    """What was trained: the epochs, where they resumed from, the checkpoints and the ranking by the monitor."""
    run_dir, rows = attempt.run_dir, outcome.metrics
    return {
        "epochs_completed": len(rows),
        "max_epochs": trainer_cfg.max_epochs,
        "stopped_early": outcome.stopped_early,
        # Bitwise repeatable: CPU (gloo) always, GPUs only in deterministic mode.
        "deterministic": deterministic or trainer_cfg.deterministic,
        "epochs_from": epochs_from(run_dir, attempt.key, len(rows)),
        "resumed_from": attempt.resumed_record,
        "partitions_per_epoch": [int(r["partition"]) for r in rows if r["partition"] not in (None, "")],
        "best_checkpoint": best,
        "last_checkpoint": file_record(outcome.last_checkpoint, run_dir),
        "checkpoints": checkpoint_records(run_dir),
        **ranking(rows, parts.thaw(trainer_cfg.monitor)),
    }
