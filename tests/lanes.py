"""Lanes of their own for the test files that mostly wait, so the cores stay busy while they do.

The Slurm files spend their time waiting on the scheduler, on cold ranks started by `srun` and on hang
bounds: `tests/slurm/test_slurm_profile.py` took 612 s of wall time for 57 s of the test process's CPU in a
whole run on CI's two cores. With two workers, the one that held a Slurm file left its core mostly idle (the
cores were 70-86% busy in the run's first 20 minutes, bench/history.md). With three or more workers the
last ones run only these files (one lane with three workers, as `make test` starts; two from four), each
taking the next waiting file as it finishes one, on a cluster of its own (`slurm_cluster` is a session
fixture, one per worker), and the others run everything else, longest first as tests/conftest.py orders
them; one of them takes a waiting file only when nothing else is left, and a lane takes the others' files once
no waiting file is left (the Slurm lane ended minutes before the CPU workers after its status checks were capped,
tests/slurm/workflow.py's FAST_STATUS). Two lanes are for a machine fast
enough that one lane's files, one after another, last as long as the CPU workers' share (1,145 s of a 1,185 s
run, Nov 28). With fewer workers every worker takes every file, as xdist's own --dist loadfile does.
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

# Test files (node-id prefixes) that wait more than they compute.
WAITING = ("tests/slurm/",)
# Below this many workers there is no lane: the waiting files would hold one of too few cores' workers.
LANE_FROM = 3
# At most this many lanes: the workers beyond the first two, up to it (the rest of the workers run the others).
MOST_LANES = 2


def waits(scope: str) -> bool:
    return scope.startswith(WAITING)


class Lanes(LoadFileScheduling):
    """--dist loadfile with the waiting files in the last workers' lanes."""

    def _lane_nodes(self) -> list[WorkerController]:
        """The workers whose lanes are the waiting files: the ones numbered last (gwN), where there are enough."""
        if len(self.nodes) < LANE_FROM:
            return []
        numbered = sorted(self.nodes, key=lambda node: int(node.gateway.id.removeprefix("gw")))
        return numbered[-min(MOST_LANES, len(numbered) - 2) :]

    def _next_scope(self, node: WorkerController) -> str | None:
        """The first file in the queue that ``node`` may take."""
        lanes = self._lane_nodes()
        if not lanes:
            return next(iter(self.workqueue), None)
        if node in lanes:
            # Once no waiting file is left, a lane takes the others too: the CPU workers' share is then the longer.
            return next((scope for scope in self.workqueue if waits(scope)), next(iter(self.workqueue), None))
        others = (scope for scope in self.workqueue if not waits(scope))
        return next(others, next(iter(self.workqueue), None))

    def _assign_work_unit(self, node: WorkerController) -> None:
        scope = self._next_scope(node)
        if scope is None:
            return
        self.workqueue.move_to_end(scope, last=False)  # xdist's own assignment takes the queue's first
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if self._next_scope(node) is None:
            node.shutdown()  # the node finishes what it holds first
            return
        super()._reschedule(node)


def scheduler(config, log) -> Lanes | None:
    """The scheduler for --dist loadfile (the one `make test` uses); xdist's own for any other."""
    if config.getoption("dist") != "loadfile":
        return None
    return Lanes(config, log)
