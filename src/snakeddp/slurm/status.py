"""What Slurm answers about a train job's state: its queue wait (a try's account, snakeddp.run.account) and this
checkout's train jobs still in its queue (``snakeddp status``).

The queue wait is the job's StartTime minus its SubmitTime as ``scontrol show job`` gives them inside the job
(the same two times sacct's Submit and Start report, and there without accounting). The queue is squeue's
answer for the user's jobs whose working directory is this checkout and whose comment is the executor
plugin's for the train rule (``rule_train_wildcards_<run>``, the job ids Snakemake submitted).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from snakeddp.slurm.launcher import LaunchError, scontrol_show
from snakeddp.slurm.watch import user_queue

# Where snakemake-executor-plugin-slurm keeps its jobs' logs, made when it submits the first (its default logdir).
SUBMITTED = Path(".snakemake/slurm_logs")
# squeue's fields: id, state, working directory, the plugin's comment, reason (last: it may hold anything).
FORMAT = "%i|%T|%Z|%k|%r"
TRAIN_JOB = re.compile(r"rule_train_wildcards_(.+)")
# Slurm's job states as snakeddp's (run.status.STATES): a job not yet running waits in the queue.
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD")


def waited(env: Mapping[str, str]) -> dict[str, Any]:
    """``{"queue_wait_s": seconds}`` of the job this process runs in, or nothing where Slurm cannot tell."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return {}
    try:
        job = scontrol_show("job", job_id, env)
        submitted, started = (datetime.fromisoformat(job[key]) for key in ("SubmitTime", "StartTime"))
    except (LaunchError, KeyError, ValueError):  # Slurm did not answer, or a time it writes as Unknown
        return {}
    return {"queue_wait_s": round(max((started - submitted).total_seconds(), 0.0), 3)}


def queued(checkout: Path) -> tuple[list[dict[str, Any]], str | None]:
    """This checkout's train jobs in Slurm's queue, one per run (``run``, ``state``, ``job_id``, ``detail``), and
    why there are none to show where squeue did not answer (None where it did). Slurm is asked only where
    Snakemake submitted jobs to it from this checkout (the executor plugin's SUBMITTED folder is there)."""
    if not (checkout / SUBMITTED).is_dir():
        return [], None
    lines = user_queue(FORMAT)
    if isinstance(lines, str):
        return [], (
            f"{lines}. HINT: type it where squeue answers, as snakemake did: on the cluster's login node, or with the "
            "SLURM_CONF (and PATH) of the shell that ran snakemake"
        )
    here, found = checkout.resolve(), []
    for line in lines:
        fields = line.split("|", 4)
        if len(fields) != 5:
            continue
        job_id, state, workdir, comment, reason = fields
        run = TRAIN_JOB.fullmatch(comment)
        if run is None or Path(workdir).resolve() != here:
            continue
        waiting = state in WAITING
        found.append({
            "run": run.group(1),
            "state": "queued" if waiting else "starting",
            "job_id": job_id,
            "detail": f"slurm job {job_id} {state.lower()}{f' ({reason})' if waiting and reason != 'None' else ''}",
        })  # fmt: skip
    return found, None
