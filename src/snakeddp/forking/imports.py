"""Importing once for many children: the warm process imports with one OpenMP thread (so that torch's
import starts no pool, which a fork would leave half-copied), freezes what it imported out of garbage
collection, and each child derives again what the imports derived from the environment (its pool
sizes from its own OMP_NUM_THREADS, Lightning's rank, numpy's seed)."""

from __future__ import annotations

import glob
import importlib
import os
import sys
from collections.abc import Mapping, Sequence

from snakeddp.forking.safety import NotForkable
from snakeddp.util.shutdown import freeze_imports, pause_collection

#: Read by the OpenMP and MKL runtimes when torch loads them: one thread, so that no pool exists at a fork.
POOL_SIZES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

#: What importing put in os.environ in this process (or the warm process it was forked from).
IMPORTED_ENV: dict[str, str] = {}


def import_once(modules: Sequence[str], entries: Sequence[str]) -> None:
    """Import ``modules`` (and so all they import) with one-thread pools, then forget ``entries``
    (run later as ``__main__``) and freeze what was imported out of garbage collection."""
    before = dict(os.environ)
    saved = {name: os.environ.get(name) for name in POOL_SIZES}
    # The pool sizes are the children's to set (each does, from its own environment, in
    # refresh_from_environment); a pool started by the import would survive a fork only as a
    # half-copied lock (without a size, torch's import left a native thread here).
    os.environ.update({name: "1" for name in POOL_SIZES})
    pause_collection()  # until freeze_imports below
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except BaseException as error:  # what the cold processes meet too, and report in their own words
                raise NotForkable(f"importing {module} failed ({type(error).__name__}: {error})") from None
    except NotForkable:
        freeze_imports()  # the collector runs again for what this process does instead
        raise
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    IMPORTED_ENV.update({k: v for k, v in os.environ.items() if k not in before})
    for entry in entries:
        # A fresh `python -m MODULE` has the module only as __main__: kept under its name as well,
        # runpy would warn, and the module would exist twice. Its imports stay.
        sys.modules.pop(entry, None)
        package, _, name = entry.rpartition(".")
        if package and hasattr(sys.modules.get(package), name):
            delattr(sys.modules[package], name)
    # Imported objects move where no collection in a child visits them: their pages stay shared
    # (copy-on-write) instead of being copied into every child by its first collection; and torch's
    # operator libraries are not undone at every child's exit.
    freeze_imports()


def refresh_from_environment() -> None:
    """State the imports derived from the environment, derived again from the child's.

    Lightning and torchmetrics read the rank once, at import (the warm process has none); numpy
    seeded its global generator from the OS at import (each fresh process gets its own stream); torch's
    OpenMP and MKL pools were sized to one thread for the warm import, and take the size a fresh
    process would: the environment's, else one thread per physical core.
    """
    fabric = sys.modules.get("lightning.fabric.utilities.rank_zero")
    if fabric is not None:
        fabric.rank_zero_only.rank = fabric._get_rank() or 0
    torchmetrics = sys.modules.get("torchmetrics.utilities.prints")
    if torchmetrics is not None:
        torchmetrics.rank_zero_only.rank = int(os.environ.get("LOCAL_RANK", 0))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(pool_size(os.environ) or physical_cores())


def physical_cores() -> int:
    """torch's intra-op pool size where nothing sets one: the machine's physical cores (cpuinfo's count)."""
    siblings = set()
    for cpu in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list"):
        try:
            with open(cpu, encoding="utf-8") as listing:
                siblings.add(listing.read().strip())
        except OSError:
            continue
    return len(siblings) or os.cpu_count() or 1


def pool_size(env: Mapping[str, str]) -> int:
    """The intra-op threads torch gives itself in a fresh process: MKL_NUM_THREADS over OMP_NUM_THREADS
    (at::intraop_default_num_threads); 0 when neither is a positive count (then nothing was forced)."""
    size = 0
    for name in POOL_SIZES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            size = int(value)
    return size
