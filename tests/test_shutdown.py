"""snakeddp.shutdown: what a finished process skips at exit, and what it must not skip."""

from __future__ import annotations

import gc
import threading
import weakref
from types import SimpleNamespace

import pytest
from snakemake.scheduling.job_scheduler import JobScheduler

from snakeddp.shutdown import freeze_imports, release_scheduler_timers
from tests.helpers import REPO


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


@pytest.mark.parametrize("rule_hook", ["onsuccess:", "onerror:"])
def test_the_workflow_releases_the_timers_when_it_is_done(rule_hook):
    text = (REPO / "Snakefile").read_text()
    hook = text.split(rule_hook, 1)[1].split("\n\n", 1)[0]
    assert "snakeddp_shutdown.release_scheduler_timers()" in hook
