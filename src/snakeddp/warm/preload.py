"""What the workflow's warm process imports: for each rule, what its step imports, and for one
invocation, what the jobs it will run import (its pending jobs, known when the workflow starts).

Imported by the Snakefile (every dry run and job reads it): imports only ``snakeddp.util.handoff``,
which imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable

from snakeddp.util import handoff

DATA = ("numpy", "snakeddp.data.generate", "blake3")
ENVIRONMENT = ("snakeddp.environment.capture",)
#: tabulate: torch's dynamo imports it at every exit of a process that imported torch (its compile-time
#: summary), 20 ms a job. (Not adlfs, gcsfs and s3fs: Lightning asks for them only of a checkpoint path in object
#: storage, snakeddp.compat.lightning.) snakeddp.training.lean_torchmetrics before Lightning: torchmetrics imported
#: without transformers and matplotlib (issue 72).
TRAINING = ("torch", "snakeddp.training.lean_torchmetrics", "lightning", "tabulate", "snakeddp.train")
TABLE = ("snakeddp.data.table",)
#: matplotlib, jinja2 and the crate's modules: 0.46 s of the report job's start.
REPORT = ("snakeddp.report.job",)
#: What each rule's step imports first thing, by rule name (snakeddp.run.rules.BY_RULE's). A rule not
#: here (run configs, a search's ranking) needs only what the entry points import.
BY_RULE = {
    "data_table": (*DATA, *TABLE),
    "data_partition": (*DATA, *TABLE),
    "data_val": (*DATA, *TABLE),
    "data_manifest": DATA,
    "data_stream": (*DATA, *TABLE),
    "data_module": TRAINING,  # the user's DataModule: Lightning's
    "env_capture": ENVIRONMENT,
    "train": TRAINING,
    "search_train": TRAINING,
    "report": REPORT,
}
#: Everything, lightest first: the order of any invocation's imports. One module is imported per turn
#: of a warm process's loop, so a job that comes meanwhile is forked between two imports (and imports
#: the rest itself, as a fresh process would); what is SLOW the heavy warm process imports, so the
#: workflow's first jobs (run configs, environment records, data) run while it imports what training needs.
ALL = (*handoff.ENTRY_POINTS, *DATA, *ENVIRONMENT, *TRAINING, *REPORT, *TABLE)
#: Imported where installed: one that fails to import is left to the jobs, which meet the same failure
#: as a fresh process (the report's environment has no blake3).
OPTIONAL = frozenset({"blake3", "tabulate"})
#: What takes seconds to import: the heavy warm process imports it (snakeddp.warm.heavy), so that the
#: jobs that do not need it (data, records, run configs) are never held up by its import.
SLOW = frozenset({*TRAINING, *REPORT})
#: A step that would import a preloaded module first thing waits for it rather than import it beside
#: the warm process: a train job's supervisor imports snakeddp.train (torch, Lightning) before it forks
#: the ranks, and two imports of torch at once on the same cores take longer than one after the other.
#: Keyed by the step's module, or by its module and subcommand (``snakeddp.steps report``); a step that
#: needs one of SLOW is forked by the heavy warm process.
NEEDS = {
    "snakeddp.cluster.supervisor": "snakeddp.train",
    "snakeddp.steps module": "snakeddp.train",  # the user's DataModule: Lightning's
    "snakeddp.steps report": "snakeddp.report.job",
}


def for_rules(rules: Iterable[str]) -> tuple[str, ...]:
    """What an invocation whose jobs are of ``rules`` imports, in ALL's order: a data-only run or a
    report's rerun imports no torch, which would take a core from its jobs for 2-3 s."""
    wanted = {*handoff.ENTRY_POINTS, *(module for rule in rules for module in BY_RULE.get(rule, ()))}
    return tuple(module for module in ALL if module in wanted)
