"""snakemake-executor-plugin-slurm's private parts: how its status check reads a job cancelled while it
pended (imported by ``snakeddp.slurm.watch`` when its watch starts), how long it waits between two status
checks (``snakeddp.slurm.polling``), and the nodes a submission leaves out (``snakeddp.slurm.exclude``); the
slurm platform only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from snakeddp.compat import check, check_package

check_package("snakemake-executor-plugin-slurm")


def read_cancelled_as_failed() -> bool:
    """Make the plugin count a cancelled job as failed; False (nothing changed) on a release other than
    the one read. Its status check (check_active_jobs, 2.8.0) looks sacct's state up in a tuple of failed
    ones, and sacct writes a cancelled job's state "CANCELLED by <uid>", which is not in it: the job
    counted as running, so Snakemake waited for ever for a job cancelled by the watch or by hand. The
    check calls the module's query_job_status, wrapped here to say "CANCELLED"."""
    if not check("cancelled_job_state"):
        return False
    import snakemake_executor_plugin_slurm as plugin

    original = plugin.query_job_status
    if getattr(original, "reads_cancelled_as_failed", False):
        return True

    async def query_job_status(command: str, logger: Any) -> tuple[dict[str, str] | None, float | None]:
        states, seconds = await original(command, logger)
        if states:
            states = {job: "CANCELLED" if state.startswith("CANCELLED ") else state for job, state in states.items()}
        return states, seconds

    query_job_status.reads_cancelled_as_failed = True  # type: ignore[attr-defined]
    plugin.query_job_status = query_job_status
    return True


def cap_status_checks(seconds: float) -> bool:
    """Make the plugin check its jobs at most ``seconds`` apart; False (nothing changed) on a release other than the
    one read. Its check_active_jobs (2.8.0) sets the wait before the next check (next_seconds_between_status_checks)
    10 s longer after each check in which no job ended, up to 180 s, whatever --seconds-between-status-checks says:
    a job that ends 40 s after the last one did is seen at 68 s. Wrapped here to bring that wait down to ``seconds``."""
    if not check("status_checks"):
        return False
    import snakemake_executor_plugin_slurm as plugin

    _CAP[:] = [seconds]
    original = plugin.Executor.check_active_jobs
    if getattr(original, "capped", False):
        return True

    async def check_active_jobs(self: Any, active_jobs: Any) -> Any:
        async for job in original(self, active_jobs):
            yield job
        self.next_seconds_between_status_checks = min(self.next_seconds_between_status_checks, _CAP[0])

    check_active_jobs.capped = True  # type: ignore[attr-defined]
    plugin.Executor.check_active_jobs = check_active_jobs
    return True


_CAP: list[float] = []


def leave_out_nodes(nodes_of: Callable[[Any], set[str]]) -> bool:
    """Make the plugin's sbatch leave out ``nodes_of(job)`` too, beside the nodes it saw fail (NODE_FAIL), with
    the same ``--exclude`` it writes for those; False (nothing changed) on a release other than the one read.
    Its run_job (2.8.0) builds each sbatch with the module's get_submit_command(job, params, settings,
    failed_nodes), looked up when it is called: wrapped here to widen failed_nodes for this one job."""
    if not check("submit_command"):
        return False
    import snakemake_executor_plugin_slurm as plugin

    _LEAVE_OUT[:] = [nodes_of]  # the latest asker's (one per Snakemake process; tests start several)
    original = plugin.get_submit_command
    if getattr(original, "leaves_out_nodes", False):
        return True

    def get_submit_command(job: Any, params: Any, settings: Any = None, failed_nodes: Any = None, **kwargs: Any) -> str:
        failed = set(failed_nodes or ()).union(*(ask(job) for ask in _LEAVE_OUT))
        return original(job, params, settings=settings, failed_nodes=failed, **kwargs)

    get_submit_command.leaves_out_nodes = True  # type: ignore[attr-defined]
    plugin.get_submit_command = get_submit_command
    return True


_LEAVE_OUT: list[Callable[[Any], set[str]]] = []
