"""Every second of a try accounted for: its wall time split into the buckets of Google's ML Goodput
Measurement (accelerator init, program start-up, data loading, checkpoint save and restore, progress lost
to a disruption, other) beside the productive training steps, with its queue wait, GPU-hours and GPUs'
mean utilisation (tries.json's ``account``, schemas/run-tries.schema.json).

Rank 0 measures the buckets as it goes (training.livestatus.LiveStatus) and posts them in status.json with
every post; the launcher folds its last post into the try when the ranks are gone, and what rank 0 did not
see (the launcher's own start, the ranks' exit, the seconds after its last post) is ``other``. A try rank 0
never posted for is all ``other``. A figure the platform cannot tell (a local job's wait in Snakemake's
scheduler) is null, said "not known", never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.run import status

# What rank 0 measures, in the order the report stacks them (productive first, other last).
MEASURED = (
    "productive_s",
    "accelerator_init_s",
    "program_startup_s",
    "data_loading_s",
    "checkpoint_save_s",
    "checkpoint_restore_s",
)
BUCKETS = (*MEASURED, "disruption_lost_s", "other_s")
NOT_KNOWN = "not known"
# The key of a platform's where_tried answer that holds the job's queue wait, where it can tell one.
QUEUE_WAIT = "queue_wait_s"


def starting(run_dir: Path, where: Mapping[str, Any], resumed: Mapping[str, Any] | None = None) -> None:
    """status.json before the ranks start: starting, with the queue wait the platform tells (``where``: its
    where_tried, asked now while its job runs), at the step it resumes from (``resumed``: last.json) or 0, and no
    progress or account yet (rank 0's posts bring this try's; the last try's were further than it resumes)."""
    waited = where.get(QUEUE_WAIT)
    status.write(
        run_dir, "starting", writer="launcher", queue_wait_s=waited, account=None, eta_s=None,
        step=resumed["step"] if resumed else 0, epoch=None, total_steps=None, percent=None, samples_per_s=None,
    )  # fmt: skip


def of_try_here(
    run_dir: Path, seconds: float, outcome: str, gpus: int, said: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The try that just ended, from rank 0's last post and the queue wait in status.json (``said``: as the caller
    read it, else read here)."""
    said = (status.read(run_dir) or {}) if said is None else said
    return of_try(
        seconds=seconds, outcome=outcome, posted=said.get("account"), gpus=gpus, queue_wait_s=said.get("queue_wait_s")
    )


def buckets(seconds: float, outcome: str, posted: Mapping[str, Any] | None) -> dict[str, float]:
    """The try's ``seconds`` split: rank 0's last post (``posted``: its account), and for a try that did not
    complete, the productive seconds after its last checkpoint save moved to ``disruption_lost_s`` (the next try
    trains them again); the rest is ``other_s``."""
    got = {name: float((posted or {}).get(name) or 0.0) for name in MEASURED}
    lost = 0.0
    if outcome != "completed":
        lost = max(got["productive_s"] - float((posted or {}).get("productive_at_save_s") or 0.0), 0.0)
        got["productive_s"] -= lost
    measured = sum(got.values()) + lost
    # Rank 0's clock and the launcher's agree to milliseconds; a sum past the try is their difference.
    scale = seconds / measured if measured > seconds > 0 else 1.0
    split = {name: round(value * scale, 3) for name, value in got.items()}
    split["disruption_lost_s"] = round(lost * scale, 3)
    split["other_s"] = round(max(seconds - sum(split.values()), 0.0), 3)
    return split


def of_try(
    *,
    seconds: float,
    outcome: str,
    posted: Mapping[str, Any] | None,
    gpus: int,
    queue_wait_s: float | None,
) -> dict[str, Any]:
    """One try's account: buckets, queue wait (None: the platform cannot tell), GPU-hours (GPUs x elapsed)
    and the GPUs' mean utilisation as rank 0 sampled it from NVML (None: no GPU, or NVML did not answer)."""
    posted = posted or {}
    return {
        "buckets": buckets(seconds, outcome, posted or None),
        "measured": bool(posted),
        "queue_wait_s": None if queue_wait_s is None else round(max(queue_wait_s, 0.0), 3),
        "gpus": gpus,
        "gpu_hours": round(gpus * seconds / 3600, 6),
        "gpu_util_mean": posted.get("gpu_util_mean") if gpus else None,
        "gpu_util_samples": int(posted.get("gpu_util_samples") or 0) if gpus else 0,
    }


def total(tries: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The tries' accounts summed (goodput's ``account``): None where no try has one (older records). The
    queue wait is None when any try's is not known; the utilisation is weighted by each try's samples."""
    accounts = [t["account"] for t in tries if t.get("account")]
    if not accounts:
        return None
    waits = [a["queue_wait_s"] for a in accounts]
    sampled = [a for a in accounts if a["gpu_util_mean"] is not None and a["gpu_util_samples"]]
    samples = sum(a["gpu_util_samples"] for a in sampled)
    return {
        "buckets": {name: round(sum(a["buckets"][name] for a in accounts), 3) for name in BUCKETS},
        "queue_wait_s": None if None in waits or len(accounts) < len(tries) else round(sum(waits), 3),
        "gpu_hours": round(sum(a["gpu_hours"] for a in accounts), 6),
        "gpu_util_mean": round(sum(a["gpu_util_mean"] * a["gpu_util_samples"] for a in sampled) / samples, 1)
        if samples
        else None,
    }


def shown(value: float | None) -> float | str:
    """A figure as runs.csv and the terminal write it: the number, or "not known"."""
    return NOT_KNOWN if value is None else value
