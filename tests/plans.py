"""What a dry run's output says it would run, read from the output itself, so that one `snakemake -n` serves a test
that asserts both the job counts and which runs' jobs are planned (tests.helpers.Workflow.planned_jobs runs its
own dry run, with the jobs' lines left out)."""

from __future__ import annotations


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count of the table a dry run prints (empty when there is nothing to do)."""
    counts: dict[str, int] = {}
    in_table = False
    for line in output.splitlines():
        parts = line.split()
        if line.startswith("-----"):
            in_table = True
            continue
        if in_table and len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "total":
                break
            counts[parts[0]] = int(parts[1])
    return counts
