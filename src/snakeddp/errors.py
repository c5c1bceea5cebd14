"""The errors snakeddp raises on purpose: one family, rooted at ConfigError.

Each says what is wrong and, ending in ``HINT:``, what to do. The entry points (``launch``,
``train``, ``steps``, ``snakeddp``) turn any of them into one line and a non-zero exit
(:func:`exit_code`), and so is a full disk or quota met anywhere (NoSpaceError; its traceback goes to
a file); anything else is a bug and keeps its traceback. Each class
also keeps the builtin base it had before the family existed, so ``except RuntimeError`` and
``except LookupError`` callers behave as they did.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO


class ConfigError(ValueError):
    """A configuration a run cannot start from; the message names the key and how to fix it.

    The root of the family: every error below is something the user changes input to fix.
    """


class TargetError(ConfigError):
    """A configured import path that cannot be imported, is the wrong kind of class, or cannot be built."""


class StrategyError(ConfigError):
    """A strategy that cannot run here (wrong accelerator, missing package, bad option)."""


class TrackerError(ConfigError):
    """An experiment tracker that is switched on but cannot run (package missing, bad settings)."""


class MonitorError(ConfigError):
    """The model does not log the metric trainer.monitor ranks epochs by."""


class DataSourceError(ConfigError):
    """A data section whose source lacks what it needs; the message names the key."""


class TableError(ConfigError):
    """The table cannot be ingested; the message names the file, column and row."""


class DataIntegrityError(ConfigError, RuntimeError):
    """A data file does not match its manifest entry (checksum, size, shape) or cannot be parsed."""


class LaunchError(ConfigError, RuntimeError):
    """This process's ranks cannot be resolved, or disagree with the run's configured layout."""


class PrecisionError(ConfigError):
    """trainer.precision that Lightning would train as something else where the run trains."""


class MachineRefusal(LaunchError):
    """What the machine a rank landed on decides, so that every attempt on such a machine meets it again:
    torch's build against the driver and the GPU (no kernels for its compute capability, a driver too old,
    a CPU build), more ranks than the node's MIG slices serve, the precision against the GPU. The rank
    leaves its line in the refusal file too (``exit_code``), and the workflow does not retry the job."""


#: A train job whose ranks were refused by the machine (MachineRefusal): EX_CONFIG, "a configuration error".
REFUSED_EXIT_CODE = 78


class HangError(LaunchError):
    """A rank stopped advancing, or never came to the ranks' meeting; the message names it and where it ran.

    Its process exits with ``exit_status`` (snakeddp.cluster.lifecycle.HUNG_EXIT_CODE), which tells a
    launcher to kill the other ranks at once instead of waiting for them to save: they are stuck too.
    """

    exit_status = 69  # EX_UNAVAILABLE: a peer is unavailable


class StepStopped(ConfigError):
    """A workflow step (data, environment record, report) that a stop reached (SIGTERM, a closed terminal's SIGHUP)
    before it finished: it ends as one line, and Snakemake removes what it had written, so nothing half-made is
    ever taken for complete; the rerun makes it again."""

    exit_status = 75  # EX_TEMPFAIL, "try again", as a preempted training run


class RunStateError(ConfigError, RuntimeError):
    """The run directory holds checkpoints whose origin cannot be confirmed."""


class CheckpointError(RunStateError):
    """A checkpoint that is damaged, or holds more than tensors and plain values (it would run code)."""


class RunNotFound(ConfigError, LookupError):
    """No finished run matches what the user named."""


class ExportError(ConfigError):
    """A run whose best model cannot be exported, or an export that cannot be loaded."""


class ProvenanceError(ConfigError):
    """A provenance record that does not match the schema; the message lists every problem."""


class LockError(ConfigError):
    """A lock file that is not a list of exact pins."""


class EnvFileError(ConfigError, RuntimeError):
    """The lock does not describe the environment the YAMLs are generated from."""


class ImageBuildError(ConfigError, RuntimeError):
    """No usable container engine, or the build failed."""


class UpstreamVersionError(ConfigError, RuntimeError):
    """An installed package is not a release that snakeddp's hooks into its private parts were written for."""


# A full disk or a spent quota, said in one line: what was being written, where, and the space left there.
# A write that meets ENOSPC or EDQUOT is seldom the error that reaches the caller: torch.save's zip writer,
# for one, raises its own RuntimeError ("unexpected pos") as it closes after the failed write, with the
# OSError only as its context. ``full_disk`` finds the OSError in that chain; NoSpaceError keeps its errno,
# so code that catches OSError behaves as before. Writers say it (snakeddp.util.fsutil); exit_code says
# the rest, as well as it can.
FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}


class NoSpaceError(OSError):
    """A write stopped by a full filesystem or a quota; ``str()`` is the whole line, with its HINT."""

    def __init__(self, code: int, line: str, path: str | None = None) -> None:
        super().__init__(code, line, path)  # args are (code, line): a pickled one is rebuilt without the path
        self.line = line

    def __str__(self) -> str:
        return self.line


def full_disk(error: BaseException | None) -> OSError | None:
    """The ENOSPC or EDQUOT OSError that ``error`` is, or was raised from or while handling."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL:
            return error
        error = error.__cause__ or error.__context__
    return None


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _mount_point(path: Path) -> Path:
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def space_left(path: str | Path) -> str:
    """Say "12.0 KiB free of 4.0 MiB on /scratch" for the filesystem that holds ``path`` (or its nearest parent)."""
    place = Path(os.path.abspath(path))
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        usage = shutil.disk_usage(place)
    except OSError:
        return f"the free space on {place} unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)} on {_mount_point(place)}"


def _shown(path: str | Path) -> str:
    """``path`` as the user typed it: relative to the working directory (the checkout) where it is under it."""
    relative = os.path.relpath(os.path.abspath(path))
    return str(path) if relative.startswith("..") else relative


def no_space(error: OSError, path: str | Path, what: str | None = None) -> NoSpaceError:
    """The one line for ``error`` (a full disk or quota, as ``full_disk`` found it) met writing ``path``."""
    code = error.errno if error.errno in FULL else errno.ENOSPC
    writing = f"{what} {_shown(path)}" if what else _shown(path)
    remedy = "free space there" if code == errno.ENOSPC else "free space within your quota there or have it raised"
    line = (
        f"{FULL[code]} writing {writing} ({space_left(path)}). HINT: {remedy}, then run the same command "
        "again: what was finished is kept, and training resumes from its last checkpoint."
    )
    return NoSpaceError(code, line, str(path))


@contextmanager
def said_when_full(path: str | Path, what: str | None = None) -> Iterator[None]:
    """A full disk or quota met inside the block, said as writing ``what`` ``path`` (snakeddp.util.fsutil's
    writes, and writers that stream into files of their own: a table's partitions); the block cleans up first,
    so the space left is counted without its partial files. One already said passes through as it is."""
    try:
        yield
    except BaseException as error:
        full = full_disk(error)
        if full is None or isinstance(full, NoSpaceError):
            raise
        raise no_space(full, path, what) from error


def print_line(line: str, stream: TextIO | None = None) -> None:
    """Write ``line`` with its newline in one write, flushed. ``print`` writes them in two, and
    Snakemake 9 writes its log records from a thread of its own (a queue listener): one of its
    lines landed between ours and our newline, and the two read as one line. A terminal that hung up
    (a closed terminal or ssh session: EIO) shows nothing: the line is dropped, not raised, which
    turned what a stopped workflow says at its end into a traceback in Snakemake's log."""
    stream = sys.stderr if stream is None else stream
    try:
        stream.write(f"{line}\n")
        stream.flush()
    except OSError as error:
        if error.errno != errno.EIO:
            raise


def add_hint(packages: str, stage: str) -> str:
    """The HINT for an optional package that is not installed: the one command that installs it to stay.

    A ``pip install`` lasts until the next set-up (``make run``), which syncs the venv to the locks and
    removes what they do not name. tools/add.sh pins ``packages`` in envs/requirements.in instead (at the
    version envs/requirements-dev.lock has), so the locks, every later set-up, the ``stage``'s conda env
    and the image all have them."""
    them = "them" if " " in packages else "it"
    return (
        f"HINT: run `tools/add.sh {packages} --stage {stage}` in the checkout (it pins {them} in envs/, so every "
        f"set-up, the {stage} stage's conda env and the image keep {them})"
    )


def one_line(prog: str, error: Exception) -> str:
    """What the user sees: the program and the message (a config with several problems lists one per line)."""
    return f"{prog}: {error}"


def exit_code(
    prog: str,
    main: Callable[[], int],
    *,
    speak: bool = True,
    failure_file: Path | None = None,
    refused_file: Path | None = None,
    explain: Callable[[Exception], str | None] | None = None,
    lost_peers: bool = False,
) -> int:
    """Run ``main``; an error of the family ends as one line and exit code 1 (or the error's own
    ``exit_status``), anything else propagates, unless ``explain`` gives it a line (a user's code that raised:
    its place), which ends it the same way with its traceback kept beside the failure file. With ``lost_peers``
    (a training rank whose platform names a gone rank itself: not Spark's), a collective that failed on a gone
    peer ends as one line too (``peer_lost``), printed and never written to the failure file.

    ``failure_file`` (set by ``snakeddp.launch`` for the ranks it starts): the first rank that fails
    writes its line there and prints nothing, and the launcher prints it once. Without it, only a
    process with ``speak`` (rank 0) prints, so N ranks do not repeat the same line. ``refused_file``:
    where a MachineRefusal's line goes too, which tells the launcher and the workflow not to try again.
    A full disk or quota met anywhere (``NoSpaceError``) ends as one line too, said by the process
    that met it.
    """
    try:
        return main()
    except KeyboardInterrupt:
        # Ctrl-C reached the job's whole process group: the workflow says what each run kept, and the job ends by
        # SIGINT as Python ends it, without the traceback of wherever the signal landed (argparse, jinja2...).
        sys.excepthook = quiet_interrupts(sys.excepthook)
        raise
    except ConfigError as error:
        line = one_line(prog, error)
        if refused_file is not None and isinstance(error, MachineRefusal):
            _written_first(refused_file, line)
        if failure_file is not None:
            if not _written_first(failure_file, line):
                print_line(line)  # a full disk has no room for it: the launcher passes it on
        elif speak:
            print_line(line)
        else:
            _give_the_speaking_rank_time()
        return getattr(error, "exit_status", 1)
    except Exception as error:
        full = full_disk(error)
        if full is None:
            lost = peer_lost(error)
            if lost is not None:
                if not lost_peers:
                    raise
                # A consequence: said, and its traceback kept where no rank's is yet, but never the failure file's
                # line, which is the cause's (a rank's own line) or, where the cause could say nothing (a kill),
                # left to the launcher's account of it.
                print_line(f"{prog}: {lost}")
                _keep_traceback(error, failure_file, replace=False)
                return 1
            said = explain(error) if explain is not None else None
            if said is None:
                raise
            _say_with_traceback_kept(f"{prog}: {said}", error, failure_file)
            return 1
        said = full if isinstance(full, NoSpaceError) else _said(full, failure_file)
        _say_with_traceback_kept(one_line(prog, said), error, failure_file)
        return 1


def quiet_interrupts(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` (a sys.excepthook) less the traceback of a KeyboardInterrupt: the interpreter (and
    snakeddp.forking.child, which calls sys.excepthook as it does) still exits by SIGINT."""

    def quiet(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            hook(kind, value, tb)

    return quiet


# What gloo's TCP transport raises in a rank whose peer process is gone (killed, or ended by its own error).
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def peer_lost(error: BaseException) -> str | None:
    """The line for a collective that failed because another rank's process is gone (a kill -9, the OOM killer,
    its own exception): that rank's end is the news (the supervisor, or its own traceback, says it), and this
    rank's traceback of torch's and gloo's frames only buried it. None for any other error."""
    said = str(error)
    if type(error).__name__ not in ("RuntimeError", "DistBackendError", "DistNetworkError"):
        return None
    words = next((words for words in PEER_GONE if words in said), None)
    if words is None or ("gloo" not in said and "Gloo" not in said):
        return None
    return f"this rank stopped: another rank of the run is gone (gloo: {words}); the line about that rank says why."


def _said(error: OSError, failure_file: Path | None) -> NoSpaceError:
    """A full disk that no writer of ours said: its file where the error names one (an open), else the folder
    the process writes in, the run's (beside its failure file) or the job's working directory."""
    if error.filename is not None:
        return no_space(error, error.filename)
    return no_space(error, failure_file.parent if failure_file is not None else os.getcwd(), "a file in")


def _say_with_traceback_kept(line: str, error: BaseException, failure_file: Path | None) -> None:
    """A full disk's line (or a lost peer's): in the failure file (the launcher prints it once), or printed where
    the disk has no room even for that line (the launcher passes a rank's output on until a failure file appears).
    Whichever rank meets it says it: it is the one that knows where. The traceback goes beside the failure file, else
    beside the job's log (stderr, where it is a file), never onto the console (profiles show failed logs)."""
    if failure_file is None or not _written_first(failure_file, line):
        print_line(line)
    _keep_traceback(error, failure_file)


def _keep_traceback(error: BaseException, failure_file: Path | None, replace: bool = True) -> None:
    """``error``'s traceback beside the failure file, else beside the job's log; ``replace`` false: only where no
    rank has kept one yet (a consequence's never hides a cause's)."""
    kept = failure_file.with_suffix(".traceback") if failure_file is not None else _beside_the_log()
    if kept is None:
        return
    staged = kept.with_name(f".{kept.name}.{os.getpid()}")
    try:
        staged.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
        if replace:
            staged.replace(kept)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(staged, kept)
    except OSError:
        pass  # the disk is full: the line said what matters
    finally:
        staged.unlink(missing_ok=True)


def _written_first(path: Path, line: str) -> bool:
    """``write_first``, False where the disk has no room for the line."""
    try:
        write_first(path, line)
    except OSError:
        return False
    return True


def _beside_the_log() -> Path | None:
    try:
        log = Path(os.readlink("/proc/self/fd/2"))
    except OSError:
        return None
    return log.with_name(log.name + ".traceback") if log.is_file() else None


# Ranks started by hand (no failure file) fail on the same config as rank 0, whose line is the one
# printed. A silent rank that exits first lets torchrun stop rank 0 before it prints (seen since
# processes exit in 0.2 s instead of 1.4 s, snakeddp.util.shutdown): it waits this long, and the
# launcher's SIGTERM, sent when rank 0 exits, ends the wait at once.
SILENT_RANK_GRACE_S = 5.0


def _give_the_speaking_rank_time() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not Lightning's or our preemption handler
    time.sleep(SILENT_RANK_GRACE_S)


def write_first(path: Path, text: str) -> None:
    """Write ``text`` unless another process already did: the first failure is the one reported."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text + "\n")
    except OSError:
        path.unlink()  # a full disk: no empty line may stand for the failure
        raise
