"""The workflow's rules as the steps they are: one registry for the rules, ``python -m snakeddp.steps``
and the report's RO-Crate.

Each rule of rules/*.smk is one ``Step``: the tool it runs, what one job of it makes, and what that
job is for. ``snakeddp.steps`` builds its subcommands from the steps it is the tool of; the
Snakefile refuses a rule that is not here (``check_rules``); the crate describes the workflow from
this list (``snakeddp.report.crate``), so a rule added is a step of every crate written after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from snakeddp.errors import ConfigError

#: How the rules call ``snakeddp.steps`` (its docstring says why shell commands, not scripts).
STEPS_CLI = "python -m snakeddp.steps"
#: What one job of a rule is for.
PER_DATASET, PER_RUN, PER_STAGE, PER_WORKFLOW, ON_REQUEST = "dataset", "run", "stage", "workflow", "request"
#: The rules that only name what to make (targets), not steps.
TARGET_RULES = ("all",)
# data.source's values (snakeddp.config.sources, whose package imports jsonschema: 0.5 s of every
# step's start, which this module is part of; tests/test_crate.py holds the two together).
SYNTHETIC, TABLE, MODULE = "synthetic", "table", "module"


@dataclass(frozen=True)
class Step:
    """A rule of the workflow and the tool it runs."""

    rule: str
    """The rule's name in rules/*.smk."""
    command: str
    """The tool, as a person would run it."""
    does: str
    """What one job of the rule makes."""
    per: str
    """What one job is for: a dataset, a run, a stage's environment, the whole workflow, or a request
    (a rule that runs only when named as a target)."""
    sources: tuple[str, ...] = ()
    """For a step per dataset: the data sources (``data.source``) whose datasets it makes."""

    @property
    def tool(self) -> str:
        """The tool's identifier in the crate: ``#snakeddp.steps-partition``, ``#snakeddp.train``."""
        return "#" + self.command.removeprefix("python -m ").replace(" ", "-")

    @property
    def subcommand(self) -> str | None:
        """The ``snakeddp.steps`` subcommand this step runs, if it runs one."""
        prefix = f"{STEPS_CLI} "
        return self.command.removeprefix(prefix) if self.command.startswith(prefix) else None


STEPS = (
    Step("data_table", f"{STEPS_CLI} ingest", "splits a table (CSV/Parquet) into the train partitions and the "
         "validation split (safetensors) and their checksum entries, in one streaming pass", PER_DATASET, (TABLE,)),
    Step("data_partition", f"{STEPS_CLI} partition", "writes one train partition (safetensors) and its checksum "
         "entry", PER_DATASET, (SYNTHETIC,)),
    Step("data_val", f"{STEPS_CLI} val", "writes the validation split and its checksum entry", PER_DATASET,
         (SYNTHETIC,)),
    Step("data_manifest", f"{STEPS_CLI} manifest", "writes a dataset's manifest: the checksum of every partition "
         "and of the validation split", PER_DATASET, (SYNTHETIC, TABLE)),
    # Of a windowed table only (snakeddp.data.stream), so no source's: a run's crate names its dataset's manifest.
    Step("data_stream", f"{STEPS_CLI} stream", "writes a windowed table's stream manifest (its task and rows per "
         "partition, from the footers), on which its runs start beside ingestion", PER_DATASET),
    Step("data_module", f"{STEPS_CLI} module", "records the user's DataModule (data.module) and its arguments, "
         "which read the data themselves", PER_DATASET, (MODULE,)),
    Step("env_capture", f"{STEPS_CLI} environment", "records a stage's environment: Python, packages, accelerator "
         "stack, and their hash", PER_STAGE),
    Step("build_image", "snakemake build_image", "builds and tags the container image of envs/Dockerfile (docker "
         "or podman) and records its digest", ON_REQUEST),
    Step("run_config", f"{STEPS_CLI} run-config", "writes a run's resolved config (run.yaml)", PER_RUN),
    Step("train", "python -m snakeddp.train", "one DDP training run (Lightning), started on every rank by a "
         "launcher (python -m snakeddp.launch)", PER_RUN),
    # Only with search: (the crate does not describe a search's rungs yet).
    Step("search_run_config", f"{STEPS_CLI} rung-config", "writes a run's config at one search rung's budget "
         "(trainer.max_epochs set to the rung's epochs)", ON_REQUEST),
    Step("search_train", "python -m snakeddp.launch", "trains one run to a search rung's budget, continuing from "
         "its longest finished budget below (or scores it on a longer attempt's first epochs)", ON_REQUEST),
    Step("search_rung", f"{STEPS_CLI} search-rung", "ranks one search rung's configurations by the mean over "
         "seeds and names those the next rung trains", ON_REQUEST),
    # On request: only with report.export (the crate does not describe it yet).
    Step("export", "snakeddp export", "writes a run's best checkpoint as model.safetensors and model.json "
         "(snakeddp.load)", ON_REQUEST),
    Step("report", f"{STEPS_CLI} report", "the runs table, the figures, the HTML report and this RO-Crate, in one "
         "job", PER_WORKFLOW),
)  # fmt: skip
BY_RULE = {step.rule: step for step in STEPS}


def for_dataset(source: str) -> list[Step]:
    """The steps that make a dataset of ``source``, in the order they run."""
    return [step for step in STEPS if step.per == PER_DATASET and source in step.sources]


def check_rules(rules: Iterable[str]) -> None:
    """Refuse a workflow whose rules and registered steps differ: the crate would misdescribe it."""
    rules = set(rules) - set(TARGET_RULES)
    unregistered, gone = sorted(rules - set(BY_RULE)), sorted(set(BY_RULE) - rules)
    if unregistered or gone:
        raise ConfigError(
            f"the workflow's rules and the steps of snakeddp.run.rules differ (rules without a step: "
            f"{', '.join(unregistered) or 'none'}; steps without a rule: {', '.join(gone) or 'none'}). HINT: give "
            "each rule of rules/*.smk one Step in src/snakeddp/run/rules.py (STEPS), and remove the steps of "
            "rules that are gone."
        )
