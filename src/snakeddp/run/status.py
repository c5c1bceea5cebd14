"""Where a run is now: ``results/runs/<run>/status.json`` (schemas/run-status.schema.json).

One writer at a time, never a collective: the launcher says ``starting`` before it starts the ranks,
rank 0 rewrites it with every post of its watch (every POST_S seconds: ``training``, its epoch and step,
samples/s, the % complete and the ETA, and the try's account so far, which the launcher folds into
tries.json), and the launcher says how the try ended when its ranks are gone. Every write is whole
(atomic_write_json): a reader never sees half of one. ``snakeddp status`` reads them all (run.livetable).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.run.layout import RunPaths
from snakeddp.util.fsutil import read_json
from snakeddp.util.numbers import readable

FORMAT = "snakeddp-status/1"
# running: a remote platform runs the job (its rank 0 posts on the platform's side: snakeddp.remote.status).
STATES = ("queued", "starting", "training", "running", "hung", "done", "failed", "stopped")
# How a try's outcome (run.tries.OUTCOMES) reads as a state.
ENDED = {"completed": "done", "hung": "hung", "failed": "failed", "preempted": "stopped", "interrupted": "stopped"}
# The states with an ETA to show: a run on its way.
LIVE = ("starting", "training", "running")


def write(run_dir: Path, state: str, fresh: bool = False, **fields: Any) -> None:
    """status.json, whole: ``state`` and what the writer knows (the others stay as the last writer left them,
    so the launcher's end keeps rank 0's step and ETA; ``fresh``: none stay, the record is of another attempt)."""
    _write(run_dir, state, {} if fresh else (read(run_dir) or {}), fields)


def _write(run_dir: Path, state: str, earlier: Mapping[str, Any], fields: Mapping[str, Any]) -> None:
    """``write`` over ``earlier``, the status.json its caller read once (rank 0 may post between two readings)."""
    if state not in STATES:
        raise ValueError(f"snakeddp.run.status: unknown state {state!r}; this is a bug")
    now = time.time()
    record = {
        **{k: v for k, v in earlier.items() if k not in ("format", "state", "updated", "host", "pid", "detail")},
        **fields,
        "format": FORMAT,
        "run_id": run_dir.name,
        "state": state,
        "updated": round(now, 3),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    _replace_whole(RunPaths(run_dir).status, record)


def _replace_whole(path: Path, record: Mapping[str, Any]) -> None:
    """The file replaced by a rename, whole, and not synced: a reader never sees half of it, and a status lost
    to a crash is rewritten at the next post (atomic_write's fsync took 10 ms of 10.4 per write here)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        partial.write_text(json.dumps(record, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


class Poster:
    """Rank 0's posts written on a thread of their own: the training loop hands the latest over and goes on,
    whatever the file system takes (a busy shared one); a post not yet written when the next comes is
    replaced by it. ``flush`` writes what is pending in the caller, before it reads the file back."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._pending: tuple[int, str, dict[str, Any]] | None = None
        self._ready = threading.Condition()
        self._writing = threading.Lock()
        self._thread: threading.Thread | None = None
        self._posted = self._written = 0  # numbered, so that an older post never replaces a newer one

    def post(self, state: str, **fields: Any) -> None:
        with self._ready:
            self._posted += 1
            self._pending = (self._posted, state, fields)
            self._ready.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="snakeddp-status", daemon=True)
            self._thread.start()

    def flush(self) -> None:
        with self._ready:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._write(pending)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._pending is not None)
                pending, self._pending = self._pending, None
            self._write(pending)

    def _write(self, pending: tuple[int, str, dict[str, Any]]) -> None:
        number, state, fields = pending
        with self._writing:
            if number > self._written:
                write(self.run_dir, state, **fields)
                self._written = number


def read(run_dir: Path) -> dict[str, Any] | None:
    """status.json, when it is one snakeddp wrote (a damaged or foreign file reads as none: it is rewritten
    within seconds, and nothing else depends on it)."""
    try:
        record = read_json(RunPaths(run_dir).status)
    except (OSError, ValueError):
        return None
    good = isinstance(record, dict) and record.get("format") == FORMAT and record.get("state") in STATES
    return record if good else None


def progress(step: int, total_steps: int | None, steps_per_s: float | None) -> dict[str, Any]:
    """The % complete and the ETA in seconds, from the step, the fit's total (Lightning's
    estimated_stepping_batches) and the recent pace; None where either is not known yet."""
    if not total_steps or total_steps <= 0:
        return {"percent": None, "eta_s": None}
    left = max(total_steps - step, 0)
    return {
        "percent": round(min(100.0 * step / total_steps, 100.0), 1),
        "eta_s": round(left / steps_per_s, 1) if steps_per_s else (0.0 if left == 0 else None),
    }


def ended(run_dir: Path, outcome: str, said: Mapping[str, Any] | None = None) -> None:
    """The launcher's last word on a try: its outcome as a state (done: the ETA is 0), rank 0's step and
    account kept as it left them. ``said``: status.json as the caller read it for the try's end, else read here."""
    state = ENDED.get(outcome, "failed")
    extra: dict[str, Any] = {"eta_s": 0.0, "percent": 100.0} if state == "done" else {"eta_s": None}
    # Read once: the step the detail names is the step kept (rank 0 may post between two readings).
    said = (read(run_dir) or {}) if said is None else said
    step, total = said.get("step"), said.get("total_steps")
    if state == "done" and step is not None and total and step < total:
        # Done short of its steps (early stopping): the row's 576/9600 beside 100% says why.
        extra["detail"] = f"stopped early, at step {readable(step)} of {readable(total)}"
    _write(run_dir, state, said, {"writer": "launcher", **extra})


TERMINAL = ("done", "failed", "hung", "stopped")
# A row's state for a run the config plans that has no status.json and no job a platform knows of.
NOT_STARTED = "not started"
COLUMNS = ("run", "state", "epoch", "step", "samples/s", "%", "ETA", "updated", "detail")


def of_checkout(
    results: Path,
    answers: list[dict[str, Any]],
    planned: Sequence[str] = (),
    now: float | None = None,
    raw: bool = False,
    earlier: Mapping[str, Mapping[str, Any]] | None = None,
    finished_pace: Mapping[str, float | None] | None = None,
) -> list[dict[str, Any]]:
    """One row per run of the checkout: every run directory's status.json, with what the platforms answer of
    the runs' jobs (``answers``: ``run``, ``state``, ``detail``), which wins where the job waits in a queue or
    the run's own status is of a try that has ended (a retry queued since); a run the config plans (``planned``)
    and nothing has started is "not started". With ``raw``, each row's ``last_finished`` is what ``earlier`` holds
    for its run: the attempt that finished before a latest one that has not (run.runs.last_finished), else None.
    ``finished_pace``: per finished run, its samples/s as `snakeddp runs` says it, which a done row shows instead of
    the last try's live pace (a resumed run's, or none for a restored one)."""
    now = time.time() if now is None else now
    runs = results / "runs"
    rows = {}
    for folder in sorted(runs.iterdir()) if runs.is_dir() else []:
        said = read(folder) if folder.is_dir() else None
        if said is not None:
            said = {**said, **_why_failed(folder, said)}
            if said["state"] == "done" and folder.name in (finished_pace or {}):
                said["samples_per_s"] = finished_pace[folder.name]
            rows[folder.name] = _raw(folder.name, said, now) if raw else _row(folder.name, said, now)
    empty = dict.fromkeys((*RAW, "updated", "updated_s_ago") if raw else COLUMNS)
    for answer in answers:
        mine = rows.get(answer["run"])
        if mine is None or answer["state"] == "queued" or mine["state"] in TERMINAL:
            rows[answer["run"]] = {**empty, "run": answer["run"], "state": answer["state"],
                                   "detail": answer.get("detail")}  # fmt: skip
    for run in planned:
        if run not in rows:
            rows[run] = {**empty, "run": run, "state": NOT_STARTED,
                         "detail": "planned by the config; no job has started it"}  # fmt: skip
    for run, row in rows.items() if raw else ():
        row["last_finished"] = (earlier or {}).get(run)
    return [rows[run] for run in sorted(rows)]


# What `snakeddp status --json` gives of each run's status.json: its values as numbers, for a script.
RAW = ("state", "epoch", "max_epochs", "step", "total_steps", "samples_per_s", "percent", "eta_s", "queue_wait_s")


def _raw(run: str, said: Mapping[str, Any], now: float) -> dict[str, Any]:
    updated = float(said["updated"])
    return {
        "run": run,
        **{key: said.get(key) for key in RAW},
        "updated": updated,
        "updated_s_ago": round(max(now - updated, 0.0), 1),
        "detail": _detail(said),
    }


def _row(run: str, said: Mapping[str, Any], now: float) -> dict[str, Any]:
    epoch, step = said.get("epoch"), said.get("step")
    return {
        "run": run,
        "state": said["state"],
        "epoch": f"{epoch}/{said.get('max_epochs')}" if epoch is not None else None,
        "step": f"{step}/{said['total_steps']}" if step is not None and said.get("total_steps") else step,
        "samples/s": readable(said.get("samples_per_s")) if said.get("samples_per_s") is not None else None,
        "%": said.get("percent"),
        # An ETA only while it runs: a run that is done, failed or hung has none to wait for (--json keeps eta_s).
        "ETA": duration(said["eta_s"]) if said.get("eta_s") is not None and said["state"] in LIVE else None,
        "updated": f"{duration(max(now - float(said['updated']), 0.0))} ago",
        "detail": _detail(said),
    }


def _why_failed(folder: Path, said: Mapping[str, Any]) -> dict[str, str]:
    """A failed try's detail where its writer gave none: the one line its first stopped rank left (refused.txt where
    the machine refused the ranks, else failure.txt; the launcher removes both as a try starts)."""
    if said["state"] != "failed" or said.get("detail"):
        return {}
    paths = RunPaths(folder)
    for path in (paths.refused, paths.failure):
        try:
            line = next((line for line in path.read_text(errors="replace").splitlines() if line.strip()), None)
        except OSError:
            continue
        if line:
            return {"detail": line.strip()}
    return {}


def _detail(said: Mapping[str, Any]) -> str:
    """What a row says of its run beside the numbers: the writer's detail, else who wrote it where, and whether that
    process is gone."""
    return (said.get("detail") or f"{said.get('writer', '')} on {said.get('host')}") + _gone(said)


def _gone(said: Mapping[str, Any]) -> str:
    """Where a run says it starts or trains but its writer, on this host, is no longer there (killed before it
    could say how it ended): said, since nothing else will."""
    if said["state"] not in ("starting", "training") or said.get("host") != socket.gethostname():
        return ""
    try:
        os.kill(int(said["pid"]), 0)
    except ProcessLookupError:
        return f"; its process (pid {said['pid']}) is gone"
    except (PermissionError, ValueError, TypeError):
        pass
    return ""


def duration(seconds: float) -> str:
    """Seconds as people read a wait: 42s, 3m05s, 2h10m."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as aligned text columns, empty cells as '-'."""
    cells = [list(COLUMNS), *([("-" if row[c] is None else str(row[c])) for c in COLUMNS] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in cells)  # fmt: skip
