"""snakemake-executor-plugin-slurm's private parts: how its status check reads a job cancelled while it
pended; imported by ``snakeddp.slurm.watch`` when its watch starts (the slurm platform only)."""

from __future__ import annotations

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
