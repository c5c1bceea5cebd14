"""The ranks of a run meet before Lightning starts its process group, within a bounded time.

Each rank connects to the run's own store (the TCPStore that torch's ``env://`` rendezvous uses:
rank 0's, or torchrun's agent's), says where it runs and the run's shape as its launcher started it,
and waits for every other rank. Rank 0 starts that store itself, shared with the process group's
(``multi_tenant``, as torch's rendezvous starts it), so Lightning finds it ready and nothing listens
twice. A rank that never comes is named, with what the others waited on; a rank that cannot reach
the store names itself and the address; a rank started as another shape (nodes x processes) is
named before any collective could hang on it. Within launch.hang_timeout's longest wait
(snakeddp.cluster.hang), where torch would wait 30 minutes and then say only "1/2 clients joined".

Then Lightning's first collective (RankHosts' all_gather, before the first step) runs on the run's
backend and network settings; a collective that does not complete there is the watch's to name.
The store stays open for the watch (snakeddp.training.watch), which posts each rank's progress to it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torch.distributed import Store, TCPStore

from snakeddp.cluster.base import Layout
from snakeddp.cluster.hang import HangTimeout, Position, ranks_text
from snakeddp.errors import HangError, LaunchError, one_line

KEY = "snakeddp/meet/{rank}"
# A call to a live store takes milliseconds: one that takes this long, its host stopped answering.
CALL_S = 4.0
PROG = "snakeddp.train"
# Where each rank's watch posts its progress (snakeddp.training.watch); the meeting posts the first.
PROGRESS = "snakeddp/progress/{rank}"
# torch's env:// rendezvous: under torchrun every rank is a client of the agent's store.
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"


class MeetingError(HangError):
    """A rank that never came to the meeting, or could not reach it; ``record`` is what hung.json keeps."""

    def __init__(self, message: str, record: dict[str, Any]) -> None:
        super().__init__(message)
        self.record = record


@dataclass(frozen=True)
class Meeting:
    """The run's store, and every rank's word on where it runs."""

    store: Store
    ranks: list[dict[str, Any]]
    seconds: float
    address: str
    port: int


def where_am_i(layout: Layout, node: str | None) -> dict[str, Any]:
    return {
        "rank": layout.rank,
        "host": socket.gethostname(),
        "node": node,
        "pid": os.getpid(),
        "shape": [layout.num_nodes, layout.local_world_size, layout.world_size],
    }


def meet(
    layout: Layout,
    address: str,
    port: int,
    timeout: HangTimeout,
    run_id: str,
    node: str | None,
    env: Mapping[str, str] = os.environ,
    node_of: Callable[[int], str | None] = lambda rank: None,
) -> Meeting:
    """Wait, at most ``timeout.longest_s``, for every rank of the run at the store on ``address:port``;
    ``node_of``: where the launcher placed a rank (the nodes of ranks that never came are named)."""
    started = time.perf_counter()
    wait = timeout.longest_s
    mine = where_am_i(layout, node)
    hosts = layout.rank == 0 and env.get(AGENT_STORE) != str(True)
    keys = [KEY.format(rank=rank) for rank in range(layout.world_size)]
    with torch_logs_held():
        try:
            store = TCPStore(
                address,
                port,
                is_master=hosts,
                multi_tenant=True,
                wait_for_workers=False,
                timeout=timedelta(seconds=wait),
            )
            store.set(KEY.format(rank=layout.rank), json.dumps(mine))
            store.set(progress_key(layout.rank), arrived(mine).to_json())
            everyone = wait_for(store, keys, started + wait)
            values = bounded(lambda: store.multi_get(keys), CALL_S) if everyone else []
            missing = [] if everyone else absent(store, keys)
        except (RuntimeError, StoreGone) as error:  # torch's DistError family: refused, timed out, address in use
            raise unreachable(run_id, mine, address, port, wait, error, hosts) from None
    if missing:
        placed = {rank: node_of(rank) for rank in missing}
        raise never_joined(run_id, mine, missing, address, port, wait, {r: n for r, n in placed.items() if n})
    ranks = [json.loads(value) for value in values]
    check_shapes(ranks)
    return Meeting(store, ranks, time.perf_counter() - started, address, port)


def absent(store: Store, keys: list[str]) -> list[int]:
    """The ranks whose key is not in the store."""
    return [rank for rank, key in enumerate(keys) if not bounded(lambda key=key: store.check([key]), CALL_S)]


@contextmanager
def torch_logs_held() -> Iterator[None]:
    """torch's C++ side logs a connection that fails as errors with its C++ stack, on file descriptor 2, and
    one that succeeds after retries as warnings: held back while the ranks meet, given back when they have
    met, and dropped when the meeting fails, which the rank's one line then says."""
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    met = False
    try:
        yield
        met = True
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        if met:
            held.seek(0)
            os.write(2, held.read())
        held.close()


def wait_for(store: Store, keys: list[str], deadline: float) -> bool:
    """Whether every key is set before ``deadline`` (perf_counter), looked for more rarely as time goes.
    Not torch's ``wait``, whose timeout also prints two lines of C++ warnings on the way. A look may take
    until the deadline: on a machine busy enough, rank 0's own store once took more than CALL_S to answer
    (CI: rank 0 called its own store unreachable), and a store that is gone is still named by the deadline."""
    pause = 0.005
    while True:
        if bounded(lambda: store.check(keys), max(CALL_S, deadline - time.perf_counter())):
            return True
        if time.perf_counter() >= deadline:
            return False
        time.sleep(min(pause, max(deadline - time.perf_counter(), 0.0)))
        pause = min(pause * 1.5, 0.1)


class StoreGone(Exception):
    """The run's store did not answer within the time given: its host stopped, or is gone."""


def bounded(operation: Callable[[], Any], seconds: float) -> Any:
    """A call to the store, at most ``seconds``. A store whose host stopped answers nothing, and torch's client
    then waits for ever, in that call and every later one (they share its socket): so the call runs in a
    thread of its own, and one that does not return in time, or fails, is StoreGone."""
    done: dict[str, Any] = {}

    def call() -> None:
        try:
            done["value"] = operation()
        except RuntimeError as error:  # torch's DistError family
            done["error"] = error

    worker = threading.Thread(target=call, name="snakeddp-store-call", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive() or "error" in done:
        raise StoreGone(str(done.get("error") or f"no answer in {seconds:g} s"))
    return done.get("value")


def progress_key(rank: int) -> str:
    return PROGRESS.format(rank=rank)


def arrived(mine: dict[str, Any]) -> Position:
    """A rank's first post: at the meeting, before any step."""
    now = time.time()
    return Position(mine["rank"], mine["host"], mine["pid"], mine["node"], 0, 0, "meeting", None, now, now)


def unreachable(
    run_id: str, mine: dict[str, Any], address: str, port: int, wait: float, error: Exception, hosts: bool
) -> MeetingError:
    reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
    if hosts and ("EADDRINUSE" in reason or "already in use" in reason):
        line = (
            f"run {run_id}: rank 0 on {mine['host']} (pid {mine['pid']}) could not start the rendezvous on port "
            f"{port} ({reason}). HINT: another process holds port {port} (find it with `ss -ltnp 'sport = :{port}'`); "
            "set launch.master_port to a free one, or null for snakeddp to pick one."
        )
    else:
        line = (
            f"run {run_id}: rank {mine['rank']} on {mine['host']} (pid {mine['pid']}) could not reach the rendezvous "
            f"at {address}:{port} within {wait:g} s ({reason}). HINT: {address}:{port} is MASTER_ADDR and "
            "MASTER_PORT as its launcher set them, where rank 0 listens: unset a MASTER_ADDR exported by hand "
            "where snakemake runs, or make that address reachable from this host."
        )
    culprit = {key: mine[key] for key in ("rank", "host", "node", "pid")}
    record = {
        "kind": "unreachable",
        "culprit": {**culprit, "step": None, "epoch": None, "phase": "meeting"},
        "stalled_s": None,
        "limit_s": wait,
        "reached_step": None,
        "line": one_line(PROG, HangError(line)),
    }
    return MeetingError(line, record)


def never_joined(
    run_id: str,
    mine: dict[str, Any],
    missing: list[int],
    address: str,
    port: int,
    wait: float,
    nodes: Mapping[int, str] | None = None,
) -> MeetingError:
    nodes = dict(nodes or {})
    came = "" if mine["rank"] in missing else f"rank {mine['rank']} on {mine['host']} (pid {mine['pid']}) "
    where = sorted(set(nodes.values()))
    placed = f" (placed on {'node' if len(where) == 1 else 'nodes'} {', '.join(where)})" if where else ""
    line = (
        f"run {run_id}: {ranks_text(missing)}{placed} never came to the rendezvous at {address}:{port}: {came}waited "
        f"{wait:g} s for {'it' if len(missing) == 1 else 'them'} before the first step. HINT: rerun to start the "
        f"run again (it resumes from its last checkpoint); where ranks take longer than {wait:g} s to start, raise "
        "launch.hang_timeout."
    )
    record = {
        "kind": "never_joined",
        "culprit": None,
        "missing": missing,
        "missing_nodes": where,
        "stalled_s": None,
        "limit_s": wait,
        "reached_step": None,
        "line": one_line(PROG, HangError(line)),
    }
    return MeetingError(line, record)


def check_shapes(ranks: list[dict[str, Any]]) -> None:
    """Every rank started as the same nodes x processes as rank 0 (Lightning would otherwise wait, e.g.
    Slurm tasks per node that differ from launch.devices: Lightning-AI/pytorch-lightning#19883)."""
    first = ranks[0]["shape"]
    odd = [rank for rank in ranks if rank["shape"] != first]
    if odd:
        other = odd[0]
        nodes, per_node, world = other["shape"]
        raise LaunchError(
            f"rank {other['rank']} on {other['host']} was started as {nodes} node(s) x {per_node} process(es) "
            f"({world} ranks), rank 0 on {ranks[0]['host']} as {first[0]} x {first[1]} ({first[2]}). HINT: start every "
            "rank with the same launcher and layout, as `python -m snakeddp.launch` does from the run config."
        )
