"""snakeddp.util.shutdown and the scheduler's timers (snakeddp.compat.snakemake): what a starting process
skips while it imports, what a finished process skips at exit, and what neither may skip."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import weakref
from types import SimpleNamespace

import pytest
from snakemake.scheduling.job_scheduler import JobScheduler

from snakeddp.compat.snakemake import release_scheduler_timers
from snakeddp.util.shutdown import freeze_imports, pause_collection
from tests.helpers import REPO, subprocess_env


def pending_timers() -> list[threading.Timer]:
    return [thread for thread in threading.enumerate() if isinstance(thread, threading.Timer)]


def test_release_cancels_snakemakes_own_reevaluation_timer_and_nothing_else():
    """Snakemake's scheduler makes the timer (its own method, on a scheduler reduced to the
    semaphore the timer releases); a timer of anyone else keeps running."""
    scheduler = SimpleNamespace(_open_jobs=threading.Semaphore(0))
    others = threading.Event()
    theirs = threading.Timer(60, others.set)
    theirs.start()
    try:
        before = set(pending_timers())
        JobScheduler._schedule_reevalutation(scheduler, 60)
        (ours,) = set(pending_timers()) - before
        assert release_scheduler_timers() == 1
        ours.join(timeout=5)
        assert not ours.is_alive()
        assert not scheduler._open_jobs.acquire(blocking=False), "a cancelled timer never wakes the scheduler"
        assert theirs.is_alive() and not others.is_set()
        assert release_scheduler_timers() == 0
    finally:
        theirs.cancel()


def test_release_knows_the_scheduler_of_snakemake_before_9_10():
    """Until 9.10 the same method lived in snakemake.scheduler: its timer is released too."""
    opened = threading.Event()

    def wake() -> None:
        opened.set()

    wake.__module__ = "snakemake.scheduler"
    wake.__qualname__ = "JobScheduler._schedule_reevalutation.<locals>.<lambda>"
    timer = threading.Timer(60, wake)
    timer.start()
    try:
        assert release_scheduler_timers() == 1
        timer.join(timeout=5)
        assert not timer.is_alive() and not opened.is_set()
    finally:
        timer.cancel()


@pytest.fixture
def frozen():
    gc.collect()
    freeze_imports()
    yield
    gc.unfreeze()


def test_freeze_exempts_what_is_alive_and_still_collects_what_comes_after(frozen):
    assert gc.get_freeze_count() > 0

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # only a collection frees a cycle
    freed = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert freed() is None


def test_freezing_the_imports_resumes_a_paused_collector(frozen):
    gc.unfreeze()
    pause_collection()
    try:
        assert not gc.isenabled()
        freeze_imports()
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.enable()


# A module that says whether the collector ran while it was imported, and one whose import fails.
PROBES = {"probe_paused.py": "import gc\nPAUSED = not gc.isenabled()\n", "probe_broken.py": "raise ImportError('no')\n"}
IMPORT_ONCE = """
import gc, sys
from snakeddp.forking.imports import import_once
from snakeddp.forking.safety import NotForkable
import_once(["probe_paused"], [])
import probe_paused
print(probe_paused.PAUSED, gc.isenabled(), gc.get_freeze_count() > 0)
gc.unfreeze()
try:
    import_once(["probe_broken"], [])
except NotForkable:
    print(gc.isenabled())
"""


def test_the_warm_processes_import_with_the_collector_paused_and_resume_it_even_when_an_import_fails(tmp_path):
    """snakeddp.forking.imports.import_once: the warm process, the supervisor's forked ranks, Spark's daemon."""
    for name, text in PROBES.items():
        (tmp_path / name).write_text(text)
    env = subprocess_env(PYTHONPATH=f"{tmp_path}:{REPO / 'src'}")
    done = subprocess.run([sys.executable, "-c", IMPORT_ONCE], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["True", "True", "True", "True"], done.stdout + done.stderr


# Counts the collections of a cold rank (`python -m snakeddp.train`) until it has read its manifest: its layout
# resolved (before the imports), torch and Lightning imported, then a manifest that is not one refused.
COLD_RANK = """
import atexit, gc, runpy, sys
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
atexit.register(lambda: print("collections", len(collections), "frozen", gc.get_freeze_count(), "on", gc.isenabled()))
sys.argv = ["snakeddp.train", *sys.argv[1:]]
runpy.run_module("snakeddp.train", run_name="__main__", alter_sys=True)
"""


def test_a_cold_rank_imports_torch_and_lightning_without_collecting_and_then_collects_again(tmp_path):
    """Without the pause, the same imports ran the collector 917 times here."""
    (tmp_path / "config.yaml").write_text("{}\n")  # a plain config file: the run "base", one process
    (tmp_path / "manifest.json").write_text("{}\n")
    args = ["--config", tmp_path / "config.yaml", "--run-dir", tmp_path / "run", "--data", tmp_path / "manifest.json"]
    done = subprocess.run(
        [sys.executable, "-c", COLD_RANK, *map(str, args)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        check=False,
    )
    refused = "not a snakeddp-manifest/1 manifest"
    assert done.returncode == 1 and refused in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    _, collections, _, frozen, _, enabled = done.stdout.split()[-6:]
    assert int(collections) < 20 and int(frozen) > 100_000 and enabled == "True", done.stdout[-300:]


def test_the_workflow_freezes_what_snakemake_imported_before_its_own_work():
    """The Snakefile's first statements: every snakemake process (each Slurm job runs two) skips walking them."""
    text = (REPO / "Snakefile").read_text()
    assert text.index("gc.freeze()") < text.index("include:") < text.index("PLAN = ")


@pytest.mark.parametrize("rule_hook", ["onsuccess:", "onerror:"])
def test_the_workflow_releases_the_timers_when_it_is_done(rule_hook):
    text = (REPO / "rules" / "hooks.smk").read_text()
    hook = text.split(rule_hook, 1)[1].split("\n\n", 1)[0]
    assert "snakeddp_snakemake.release_scheduler_timers()" in hook


def test_freeze_at_exit_freezes_before_the_final_collection():
    """atexit runs its callbacks last-registered first: the probe, registered before, sees the freeze."""
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
        "from snakeddp.util.shutdown import freeze_at_exit\n"
        "freeze_at_exit()\n"
        "assert gc.get_freeze_count() == 0\n"
    )
    env = subprocess_env()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(done.stdout.split()[-1]) > 1000, done.stdout


# One write per line: under PYTHONUNBUFFERED print() writes each piece on its own, and the two
# workers' pieces interleaved ("rankrank 1").
WORKER = (
    "import os, sys; rank = os.environ['RANK']; os.write(1, f'rank {{rank}}\\n'.encode()); sys.exit(int(rank) * {code})"
)


@pytest.mark.parametrize("code", [0, 3])
def test_the_agent_is_torchrun(tmp_path, code):
    """python -m snakeddp.cluster.agent takes torchrun's arguments, starts its workers and exits as it does."""
    (tmp_path / "worker.py").write_text(WORKER.format(code=code))
    args = ["--standalone", "--nproc-per-node=2", "--max-restarts=0", "worker.py"]
    done = {
        module: subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=subprocess_env(),
            check=False,
            timeout=120,
        )
        for module in ("snakeddp.cluster.agent", "torch.distributed.run")
    }
    ours, torchrun = done["snakeddp.cluster.agent"], done["torch.distributed.run"]
    assert sorted(ours.stdout.splitlines()) == sorted(torchrun.stdout.splitlines()) == ["rank 0", "rank 1"]
    assert ours.returncode == torchrun.returncode == (0 if code == 0 else 1), ours.stderr[-2000:]
    if code:
        assert "ChildFailedError" in ours.stderr and "exitcode  : 3" in ours.stderr, ours.stderr[-2000:]


LIBRARY_PROBE = """
import atexit, weakref
seen = {}
# Registered before torch is imported: atexit runs it after weakref.finalize's exit work.
atexit.register(lambda: print("kept", sum(f.alive for f in seen["early"]), len(seen["early"]), seen["late"].alive))
import torch
from snakeddp.util.shutdown import freeze_imports, pause_collection

def teardowns():
    return [f for f, info in weakref.finalize._registry.items() if info.func is torch.library._del_library]

freeze_imports()
seen["early"] = teardowns()
library = torch.library.Library("snakeddp_probe", "DEF")  # a user's own operators, made after
(seen["late"],) = [f for f in teardowns() if f not in seen["early"]]
"""


def test_torchs_operator_libraries_die_with_the_process_but_a_later_library_is_torn_down():
    done = subprocess.run(
        [sys.executable, "-c", LIBRARY_PROBE], capture_output=True, text=True, env=subprocess_env(), check=True
    )
    kept, early, late_alive = done.stdout.split()[-3:]
    assert int(early) > 50 and kept == early, done.stdout
    assert late_alive == "False", "the library made after the imports was torn down at exit"
