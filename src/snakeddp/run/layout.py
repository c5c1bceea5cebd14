"""Every file and folder of a run directory, named here and nowhere else (submitit's ``JobPaths``).

::

    results/runs/<run>/                 RunPaths
        run.yaml                        the run's resolved config (the run_config rule)
        provenance.json                 what the run was made from; the train rule's output, written last
        finished.json                   the attempt's own copy of provenance.json (see FINISHED)
        run-state.json                  the attempt key the checkpoints were made from (schemas/run-state.schema.json)
        .seeding-<pid>/                 a finished attempt being copied in, to continue or restore it (run.attempt.seed)
        metrics.csv                     one row per epoch
        checkpoints/                    the top-k by val_loss and last.ckpt, and last.json: the newest, its step, time
        trace/rank-<r>.jsonl            which samples each rank saw (trainer.trace_samples)
        tracking/                       the trackers' local stores and their state.json
        failure.txt                     the one line of the first rank that stopped on a snakeddp error
        refused.txt                     the same line, where the machine refused the ranks (not retried)
        hung.json                       what the rank that found the try hung said (run.tries folds it in)
        hang/try-<n>/                   the evidence of the attempt's try <n> that hung: stacks.txt, gpu.json
                                        (training.gather)
        tries.json                      every start of the attempt's ranks and how it ended (run.tries)
        status.json                     where the run is now: state, step, ETA (run.status; rank 0 and the launcher)
        .attempt.lock                   held (shared) by every training process of a live attempt
        .snakeddp-resume-seeded         in an AzureML job's run directory: rank 0 copied the resumed attempt
        <platform>/                     what its platform keeps of the run, named after it: a remote
                                        platform's job (azureml/, databricks/: snakeddp.remote.folder), a
                                        Spark driver's scratch while it runs (spark/: the ranks' settings,
                                        TMPDIR, spark.local.dir, the stop request; snakeddp.spark.driver)
        attempts/<id>/                  an earlier attempt, AttemptPaths (its finished.json as provenance.json)
            pruned.json                 what `snakeddp prune` removed of its checkpoints, and when (run.prune)
        attempts/<id>-pruned/           one that was not restored, its checkpoints pruned (-damaged: missing or
                                        changed): kept whole, under a name no restore takes back
                                        (provenance.lineage); an unfinished one whose checkpoints
                                        `snakeddp prune` removed (run.prune)

    logs/train/<run>.log                the train job's log, beside results/ (the train rule's ``log:``)

Only names, paths and globs live here; no file is read or written: ``run.attempt`` moves attempts,
``run.runs`` reads finished ones, training writes them. On the run floor, under everything that
touches a run directory (the launcher, every rank, the report, the AzureML submitter) and light
enough for the Snakefile's imports: the standard library only (tests/run/test_layout.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RUNS = "runs"
# What a run (its directory under runs/) may be called: the run wildcard's constraint (rules/common.smk),
# the check of every planned id (workflow.preflight.check_run_ids) and of every record read (run.runs).
RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.+-]*"
# A run id names files (logs/train/<id>.config.log): well under NAME_MAX (255) with every suffix.
RUN_ID_MAX = 200
RUN_FILE = "run.yaml"
PROVENANCE = "provenance.json"
# A copy of provenance.json that the attempt keeps: Snakemake deletes provenance.json (the
# train rule's output) before it reruns the rule, and the attempt's record must survive that.
FINISHED = "finished.json"
STATE = "run-state.json"
METRICS = "metrics.csv"
CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
LAST_SAVED = "last.json"  # the newest checkpoint saved whole (top-k or last.ckpt): its name, step and time
CHECKPOINT_GLOB = "*.ckpt"
TRACE = "trace"
TRACE_FILE = "rank-{rank}.jsonl"
TRACKING = "tracking"
TRACKING_STATE = "state.json"
FAILURE = "failure.txt"
REFUSED = "refused.txt"
HUNG = "hung.json"
HANG_EVIDENCE = "hang"
HANG_TRY = "try-{number}"  # one folder per hung try: a later hang's evidence never replaces an earlier one's
HANG_STACKS = "stacks.txt"  # in a hung try's folder: every rank's Python stack (training.gather)
STATUS = "status.json"
TRIES = "tries.json"
LOCK = ".attempt.lock"
RESUME_SEEDED = ".snakeddp-resume-seeded"
SEEDING = ".seeding-{pid}"
ATTEMPTS = "attempts"
# Beside a kept attempt's record: the checkpoints `snakeddp prune` removed, and when (run.prune).
PRUNED = "pruned.json"
TRAIN_LOG = "logs/train/{run}.log"

# What an attempt leaves in the run directory; moved together into attempts/<id>/, staged into a remote job
# and brought back from it (remote.entry, remote.attempt, databricks.results). A hang's evidence goes with the
# tries that name it.
ATTEMPT_FILES = (CHECKPOINTS, METRICS, TRACE, TRACKING, STATE, FINISHED, TRIES, HANG_EVIDENCE, PRUNED)
# In attempts/<id>/ the finished record is provenance.json again, so a kept attempt reads like a run.
STORED_AS = {FINISHED: PROVENANCE}


@dataclass(frozen=True)
class AttemptPaths:
    """The files one attempt leaves: in its run directory while current, under ``attempts/<id>/`` once kept."""

    folder: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder))

    @property
    def provenance(self) -> Path:
        return self.folder / PROVENANCE

    @property
    def metrics(self) -> Path:
        return self.folder / METRICS

    @property
    def state(self) -> Path:
        return self.folder / STATE

    @property
    def checkpoints(self) -> Path:
        return self.folder / CHECKPOINTS

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / LAST_CHECKPOINT

    @property
    def last_saved(self) -> Path:
        """The newest checkpoint saved whole, the step it holds and when it was written (run.tries)."""
        return self.checkpoints / LAST_SAVED

    @property
    def pruned(self) -> Path:
        """What `snakeddp prune` removed of this attempt's checkpoints, and when (run.prune)."""
        return self.folder / PRUNED

    @property
    def tries(self) -> Path:
        """Every start of the attempt's ranks and how it ended (run.tries)."""
        return self.folder / TRIES

    @property
    def hang_evidence(self) -> Path:
        """The evidence of the attempt's hung tries, a folder each (hang_of), written whole by the rank that
        found the hang (snakeddp.training.gather)."""
        return self.folder / HANG_EVIDENCE

    def hang_of(self, number: int) -> Path:
        """The evidence of the attempt's try ``number`` (tries.json's ``number``), where it hung."""
        return self.hang_evidence / HANG_TRY.format(number=number)

    def stacks_of(self, number: int) -> Path:
        """Every rank's Python stack when the attempt's try ``number`` was found hung, where it was kept."""
        return self.hang_of(number) / HANG_STACKS

    def checkpoint_files(self) -> list[Path]:
        """Every checkpoint in checkpoints/ (top-k and last), sorted by name."""
        return sorted(self.checkpoints.glob(CHECKPOINT_GLOB))

    @property
    def trace(self) -> Path:
        return self.folder / TRACE

    def trace_file(self, rank: int) -> Path:
        """The sample ids ``rank`` trained on, one JSON line per epoch."""
        return self.trace / TRACE_FILE.format(rank=rank)

    @property
    def tracking(self) -> Path:
        return self.folder / TRACKING

    @property
    def tracking_state(self) -> Path:
        """The trackers' run ids, so a resumed attempt continues the same MLflow / W&B run."""
        return self.tracking / TRACKING_STATE

    @property
    def is_kept(self) -> bool:
        """Whether this is an earlier attempt kept under a run's attempts/ (not the run's current one)."""
        return self.folder.parent.name == ATTEMPTS

    @property
    def run_dir(self) -> Path:
        """The run directory this attempt belongs to."""
        return self.folder.parent.parent if self.is_kept else self.folder


@dataclass(frozen=True)
class RunPaths(AttemptPaths):
    """A run directory: its current attempt's files plus what belongs to the run as a whole."""

    @classmethod
    def under(cls, results: str | Path, run_id: str) -> RunPaths:
        """The run directory of ``run_id`` in a results directory."""
        return cls(Path(results) / RUNS / run_id)

    @property
    def run_file(self) -> Path:
        return self.folder / RUN_FILE

    @property
    def finished(self) -> Path:
        return self.folder / FINISHED

    @property
    def failure(self) -> Path:
        """Where the first rank that stops on a snakeddp error leaves its one line for the launcher."""
        return self.folder / FAILURE

    @property
    def refused(self) -> Path:
        """Where that line is too when the machine refused the ranks (snakeddp.errors.MachineRefusal): an
        attempt that every retry on such nodes would repeat, which the workflow therefore does not retry."""
        return self.folder / REFUSED

    @property
    def hung(self) -> Path:
        """What the rank that found the try hung said, until the launcher folds it into tries.json."""
        return self.folder / HUNG

    @property
    def status(self) -> Path:
        """Where the run is now, rewritten with every post (run.status)."""
        return self.folder / STATUS

    @property
    def lock(self) -> Path:
        return self.folder / LOCK

    @property
    def resume_seeded(self) -> Path:
        return self.folder / RESUME_SEEDED

    def platform(self, name: str) -> Path:
        """What the platform ``name`` keeps of the run (a folder named after the platform)."""
        return self.folder / name

    @property
    def attempts(self) -> Path:
        return self.folder / ATTEMPTS

    def attempt(self, attempt_id: str) -> AttemptPaths:
        """An earlier attempt's place, ``attempts/<attempt id>/``."""
        return AttemptPaths(self.attempts / attempt_id)

    def unused_attempt(self, name: str) -> AttemptPaths:
        """``attempts/<name>/``, or ``<name>-2``, ``-3``, ... where that is taken: a folder set aside lands on none
        kept before it."""
        target, suffix = self.attempt(name), 1
        while target.folder.exists():
            suffix += 1
            target = self.attempt(f"{name}-{suffix}")
        return target

    def kept_records(self) -> list[Path]:
        """provenance.json of every finished attempt kept under attempts/ (in no particular order)."""
        return list(self.attempts.glob(f"*/{PROVENANCE}"))

    def kept_unfinished(self) -> list[AttemptPaths]:
        """Every attempt kept under attempts/ that did not finish (no provenance.json), by folder name."""
        folders = sorted(path for path in self.attempts.glob("*") if path.is_dir())
        return [AttemptPaths(folder) for folder in folders if not (folder / PROVENANCE).exists()]


def paths_of(folder: str | Path) -> AttemptPaths:
    """The paths of a run directory (RunPaths) or of an earlier attempt kept in one (AttemptPaths)."""
    attempt = AttemptPaths(Path(folder))
    return attempt if attempt.is_kept else RunPaths(attempt.folder)


def run_records(results: str | Path) -> list[Path]:
    """provenance.json of every finished run under ``results/runs``, sorted by run id."""
    return sorted(Path(results).glob(f"{RUNS}/*/{PROVENANCE}"))


def train_log(workdir: str | Path, run_id: str) -> Path:
    """The train job's log of ``run_id`` in the directory the workflow ran in."""
    return Path(workdir) / TRAIN_LOG.format(run=run_id)


def latest_train_log(workdir: str | Path, run_id: str, since: float = 0.0) -> Path | None:
    """The train job's log of ``run_id``, or where the next invocation moved it aside when that job did not finish
    (``<run>.<UTC stamp>.log``, workflow.interrupt.keep_unfinished_logs), the newest written at ``since`` or later
    (an older one is an earlier attempt's); None when there is neither."""
    log = train_log(workdir, run_id)
    if log.is_file():
        return log
    stamped = re.compile(rf"{re.escape(run_id)}\.\d{{8}}T\d{{6}}Z\.log")
    aside = sorted(
        path
        for path in log.parent.glob(f"{run_id}.*.log")
        if stamped.fullmatch(path.name) and path.stat().st_mtime >= since
    )
    return aside[-1] if aside else None


def checkpoint_name(metric: str) -> str:
    """ModelCheckpoint's name for a top-k checkpoint (auto_insert_metric_name off: the names are ours):
    epoch (counted from 1: training.checkpoints) and score of the monitored metric,
    epoch003-val_loss0.4210; a metric whose name is no plain word (valid/f1) would make directories of
    the name, so those carry the epoch only."""
    if metric.replace("_", "a").isalnum():
        return f"epoch{{epoch:03d}}-{metric}{{{metric}:.4f}}"
    return "epoch{epoch:03d}"
