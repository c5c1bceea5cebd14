"""Ends the wait for a Slurm job of this workflow that can never start.

snakemake-executor-plugin-slurm polls a pending job until it leaves the queue, so a job that
Slurm keeps pending for a reason no wait can clear (PartitionConfig, PartitionTimeLimit, a QOS's
per-job limit, every node that could hold it down or drained) kept Snakemake waiting without end,
and on SIGTERM Snakemake waits for it too. From onstart to onsuccess/onerror a thread in
Snakemake's process asks squeue every POLL_S seconds for this workflow's pending jobs and cancels
one pending for such a reason (``end``), which the plugin then counts as failed like any other job
(``read_cancelled_as_failed``). One line per job says why, with a HINT; its retry, pending for the
same reason, is cancelled without another line. Reasons that do clear by waiting (Resources,
Priority, a group limit, a reservation, a partition down for maintenance, a node coming back) are
left alone.

This workflow's jobs are the user's jobs whose working directory is this one and which were not
in the queue when the workflow started (Snakemake's lock keeps a second invocation out of the
directory).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from snakeddp.slurm import nodes as slurm_nodes
from snakeddp.slurm import polling

# Seconds between two looks at the queue: a job's reason is set by the scheduler's passes (about
# every minute on a busy cluster), and the plugin itself checks its jobs every 20 s to 3 min. A site (or a
# test, whose scheduler passes take a second) sets another in polling.WATCH_VARIABLE.
POLL_S = 10.0
# How long closing waits for a look at the queue that is under way.
CLOSE_TIMEOUT_S = 15.0
QUERY_TIMEOUT_S = 10
# squeue's fields: id, partition, working directory, the plugin's comment (rule_<rule>_wildcards_<...>),
# nodes, CPUs per node, memory per node, TRES per node (gres:gpu:a100:2), time limit, reason (last:
# Slurm's description of a reason may hold anything).
FORMAT = "%i|%P|%Z|%k|%D|%c|%m|%b|%l|%r"
NODE_REASONS = ("ReqNodeNotAvail", "NodeDown", "PartitionNodeLimit", "Nodes required for job are DOWN")
# A limit of the job's QOS or association on any one job or node: no other job's end lifts it.
PER_JOB_LIMIT = re.compile(r"^(QOS|Assoc)(Max\w*Per(Job|Node)\w*|Min\w+)$")
# What a reason that cannot clear means, and what to change: {partition} is the job's partition.
FIXED = {
    "PartitionConfig": (
        "it asks for more than partition {partition} lets one job have",
        "lower what the run asks per node (launch.devices, launch.mem_mb, the site: sizes) to what `scontrol show "
        "partition {partition}` allows, or train on another partition (set-resources: train: slurm_partition)",
    ),
    "BadConstraints": (
        "no node of partition {partition} has the features it asks for",
        "set the profile's set-resources: train: constraint to features `sinfo -p {partition} -o %f` lists",
    ),
    "InvalidAccount": (
        "its account is not (or no longer) valid",
        "set the profile's slurm_account to one `sacctmgr show associations user=$USER` lists",
    ),
    "InvalidQOS": (
        "its QOS is not (or no longer) valid",
        "set the profile's set-resources: train: qos to one `sacctmgr show associations user=$USER` lists",
    ),
}


@dataclass(frozen=True)
class Pending:
    """One pending job as squeue shows it."""

    job_id: str
    partition: str
    workdir: str
    comment: str
    nodes: int
    cpus: int
    mem_mb: int
    gres: str
    time_limit: str
    reason: str

    @classmethod
    def from_line(cls, line: str) -> Pending | None:
        fields = line.split("|", FORMAT.count("|"))
        if len(fields) != FORMAT.count("|") + 1 or not fields[4].isdigit() or not fields[5].isdigit():
            return None
        job, partition, workdir, comment, nodes, cpus, memory, gres, limit, reason = fields
        return cls(
            job, partition, workdir, comment, int(nodes), int(cpus), slurm_nodes.megabytes(memory), gres, limit, reason
        )

    @property
    def what(self) -> str:
        """The job as Snakemake knows it: ``rule train, devices-1``."""
        match = re.fullmatch(r"rule_(.+?)(?:_wildcards_(.+))?", self.comment)
        return f"rule {match.group(1)}{f', {match.group(2)}' if match.group(2) else ''}" if match else self.comment

    def need(self) -> slurm_nodes.Need:
        """What the job asks of each node: its CPUs, memory and GPUs per node."""
        found = slurm_nodes.gpus(re.sub(r"^gres[:/]", "", self.gres).replace("=", ":"))
        kind, count = next(iter(found.items()), (None, 0))
        return slurm_nodes.Need(self.nodes, self.cpus, self.mem_mb, count, kind)


def user_queue(fields: str, *states: str) -> list[str] | str:
    """squeue's lines (``fields``: its --format) for this user's jobs, of ``states`` where given; or why there
    are none (a line): squeue is not on PATH, did not answer within QUERY_TIMEOUT_S, or failed."""
    argv = ["squeue", "--noheader", f"--user={os.getuid()}", f"--format={fields}"]
    if states:
        argv.append(f"--states={','.join(states)}")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return "squeue is not on PATH"
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"squeue did not answer ({error})"
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        return f"squeue failed: {said[-1][:200]}"
    return done.stdout.splitlines()


def minutes(limit: str) -> int | None:
    """A Slurm time (``30``, ``30:00``, ``1:30:00``, ``1-00:00:00``) in whole minutes; None when
    unlimited or not a time."""
    days, _, rest = limit.strip().rpartition("-")
    parts = rest.split(":")
    if not all(part.isdigit() for part in parts) or (days and not days.isdigit()) or len(parts) > 3:
        return None
    numbers = [int(part) for part in parts]
    # With days the first field is hours; without, one field is minutes, two are minutes:seconds.
    if days or len(numbers) == 3:
        hours, mins = [*numbers, 0][:2]
    else:
        hours, mins = 0, numbers[0]
    return int(days or 0) * 24 * 60 + hours * 60 + mins


def time_above(job: Pending, where: str, partitions: Callable[[], Mapping[str, slurm_nodes.Partition]]) -> int | None:
    """Partition ``where``'s MaxTime in minutes when ``job``'s time limit is above it; else (or when Slurm does
    not say) None."""
    try:
        known = partitions().get(where)
    except slurm_nodes.SlurmNodesError:
        return None
    most = minutes(known.max_time) if known and known.max_time else None
    asked = minutes(job.time_limit)
    return most if most is not None and asked is not None and asked > most else None


def verdict(job: Pending, partitions: Callable[[], Mapping[str, slurm_nodes.Partition]]) -> tuple[str, str] | None:
    """Why ``job`` can never start and what to change (the HINT), or None when its reason may clear
    by waiting. ``partitions`` asks Slurm for its nodes, only for a reason that turns on them."""
    code = re.split(r"[,:( ]", job.reason.strip("()"), maxsplit=1)[0]
    where = job.partition.split(",")[0]
    if code in ("PartitionTimeLimit", "PartitionConfig"):
        # Slurm 22.05 gave a job whose time limit is above MaxTime either reason (PartitionConfig on CI's machine,
        # PartitionTimeLimit here, for the same job): the partition's MaxTime tells which it is.
        over = time_above(job, where, partitions)
        if over is not None or code == "PartitionTimeLimit":
            most = f" (its MaxTime, {over} minutes)" if over is not None else ""
            at_most = f" to at most {over}" if over is not None else ""
            return (
                f"its time limit ({job.time_limit}) is above what partition {where} allows{most}",
                f"lower launch.runtime (minutes){at_most}, or train on another partition (set-resources: train: "
                "slurm_partition)",
            )
    if code in FIXED:
        why, hint = FIXED[code]
        return why.format(partition=where), hint.format(partition=where)
    if PER_JOB_LIMIT.match(code):
        return (
            f"it asks for more (or less) than its QOS or account lets any one job have ({code})",
            "fit the run's launch: (nodes, devices, runtime) to the limits `sacctmgr show qos` lists, or use "
            "another qos (set-resources: train: qos)",
        )
    if not job.reason.startswith(NODE_REASONS):
        return None
    try:
        known = partitions()
    except slurm_nodes.SlurmNodesError:
        return None
    wanted = job.need()
    held = [known[name] for name in job.partition.split(",") if name in known]
    if not held or any(len(partition.hosts(wanted)) >= wanted.nodes for partition in held):
        return None
    down = sorted(node.name for partition in held for node in partition.nodes if not node.usable)
    names = ", ".join(down[:5]) + (f" and {len(down) - 5} more" if len(down) > 5 else "")
    return (
        f"no node of partition {job.partition} that could hold it is up ({names or 'none'} down or drained), so it "
        "would wait until someone brings one back",
        f"run again when `sinfo -p {where}` shows such nodes idle or mixed, or train on another partition "
        "(set-resources: train: slurm_partition)",
    )


def end(job_id: str) -> bool:
    """Cancel a job that is still pending (never one that started since it was looked at); whether
    it was. scancel says nothing when its filter matched no job: squeue tells."""
    subprocess.run(["scancel", "--state=PENDING", job_id], capture_output=True, timeout=QUERY_TIMEOUT_S, check=False)
    state = ["squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%T"]
    done = subprocess.run(state, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    return done.stdout.strip() == "CANCELLED"


class PendingWatch:
    """The thread that cancels this workflow's jobs that can never start; ``say`` writes its lines
    (Snakemake's logger: one writer for its stream)."""

    def __init__(self, say: Callable[[str], None], workdir: Path | None = None, poll_s: float | None = None) -> None:
        self._say = say
        self._workdir = os.path.realpath(workdir or Path.cwd())
        self._poll_s = poll_s or polling.seconds(polling.WATCH_VARIABLE, POLL_S)
        self._stop = threading.Event()
        # Held while a job is cancelled and its line written, so nothing happens once close() returns.
        self._lock = threading.Lock()
        self._closed = False
        self._before: set[str] = set()
        # The jobs told of, by the plugin's comment (rule and wildcards: the same for every retry).
        self._told: set[str] = set()
        self._thread: threading.Thread | None = None

    def _queue(self, *states: str) -> list[Pending] | None:
        lines = user_queue(FORMAT, *states)
        if isinstance(lines, str):  # squeue did not answer: the next look asks again
            return None
        jobs = (Pending.from_line(line) for line in lines)
        return [job for job in jobs if job and os.path.realpath(job.workdir) == self._workdir]

    def start(self) -> None:
        """Note the jobs already queued from this directory (not this workflow's) and start watching,
        where the plugin will count a cancelled job as failed (``read_cancelled_as_failed``)."""
        from snakeddp.compat.snakemake_executor_plugin_slurm import read_cancelled_as_failed

        if not read_cancelled_as_failed():
            return
        self._before = {job.job_id for job in self._queue() or []}
        self._thread = threading.Thread(target=self._watch, name="snakeddp-slurm-pending", daemon=True)
        self._thread.start()

    def look(self) -> None:
        """One look at the queue: cancel what can never start."""
        ask = _Once(slurm_nodes.ask)
        for job in self._queue("PENDING") or []:
            if job.job_id in self._before:
                continue
            found = verdict(job, ask)
            if found is None:
                continue
            why, hint = found
            with self._lock:
                if self._closed:
                    return
                if not end(job.job_id) or job.comment in self._told:
                    continue  # no longer pending (the next look sees where it is), or a retry already told of
                self._told.add(job.comment)
                self._say(
                    f"Slurm job {job.job_id} ({job.what}) can never start, so it was cancelled: {why}. HINT: {hint}."
                )

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.look()
            except (OSError, subprocess.SubprocessError, slurm_nodes.SlurmNodesError):
                continue  # Slurm did not answer this time; the next look asks again.

    def close(self) -> None:
        """Stop watching; no job is cancelled and no line written after this returns."""
        self._stop.set()
        with self._lock:
            self._closed = True
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)


class _Once:
    """Slurm's partitions, asked at most once per look and only when a reason turns on them."""

    def __init__(self, ask: Callable[[], dict[str, slurm_nodes.Partition]]) -> None:
        self._ask = ask
        self._answer: dict[str, slurm_nodes.Partition] | None = None

    def __call__(self) -> dict[str, slurm_nodes.Partition]:
        if self._answer is None:
            self._answer = self._ask()
        return self._answer
