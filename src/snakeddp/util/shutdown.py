"""Shorter process starts and exits: what the collector spends on a process's imports, cut where it is waste.

At start: every 700 allocations Python's cyclic collector runs, and its older generations walk every
object alive, so a cold ``import lightning.pytorch`` (about a million objects, next to no garbage)
spent about 1 s of its 7 s in collections here. The entry points that import torch and Lightning
cold (a rank, the warm process and the supervisor's forked ranks, Spark's daemon, the report job)
pause the collector first (``pause_collection``); ``freeze_imports`` resumes it.

At exit, measured on the 2-core VM (bench/results.md, 8.): a training process that imported torch and
Lightning took 1.4 s from its last line to its exit, Snakemake up to 1.4 s after "Elapsed time".
Every run, every report job and every ``snakemake`` that ran a job paid that. (Snakemake's own wait
at exit, its scheduler's last timer, is released by ``snakeddp.compat.snakemake``.)
"""

from __future__ import annotations

import atexit
import gc
import sys
import weakref


def pause_collection() -> None:
    """Stop collecting garbage until ``freeze_imports``: call it before an entry point's imports.

    Imports make objects that live as long as the process (modules, classes, functions) and almost
    no cycles, so a collection during them finds nothing and walks everything: without them a cold
    ``import lightning.pytorch`` took 6.0 s of CPU here, with them 7.1 s. Never call it without
    ``freeze_imports`` on the same path: what the work allocates must be collected.
    """
    gc.disable()


def freeze_imports() -> None:
    """Exempt every object alive now (in practice: what the imports made) from garbage collection.

    Python's shutdown collects garbage over every live object: after ``import lightning`` that
    took 1.2 s of each training process here (1.40 s from the last line to exit, 0.23 s with
    the imports frozen), and 0.3-0.4 s for the report's and Snakemake's imports. ``gc.freeze()``
    moves the objects alive now into a permanent generation that no collection visits: the last
    one, and the full collections during training. Frozen objects are never freed, so call it
    after the imports and before the work; what the work allocates is collected as before.
    Also ``skip_library_teardown``, the other exit work the imports left; and the collector runs
    again, where ``pause_collection`` stopped it for the imports.
    """
    gc.freeze()
    gc.enable()
    skip_library_teardown()


def skip_library_teardown() -> None:
    """Let the operator libraries torch registered so far die with the process, not undo them at exit.

    Each ``torch.library.Library`` holds a ``weakref.finalize`` that runs at exit and takes its
    operators back out of torch's dispatcher: after ``import lightning`` 174 of them, 57 ms of every
    exit here, 0.1 s in a process forked from a warm one (the pages they touch are copied first).
    Nothing reads the dispatcher after the interpreter's exit work, so they only cost time; a library
    made later (a user's own operators) is still torn down as before.
    """
    teardown = getattr(sys.modules.get("torch.library"), "_del_library", None)
    if teardown is None:
        return
    for finalizer, info in list(getattr(weakref.finalize, "_registry", {}).items()):
        if info.func is teardown:
            finalizer.atexit = False


def freeze_at_exit() -> None:
    """``freeze_imports`` at interpreter exit, for a process whose code is not ours (torchrun):
    atexit callbacks run before Python's final collection, which then has nothing to walk."""
    atexit.register(gc.freeze)
