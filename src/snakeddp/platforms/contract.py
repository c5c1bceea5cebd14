"""What every platform implements, and what the workflow hands it.

The workflow (the Snakefile's PLAN: snakeddp.workflow.plan) asks the platform of its profile, through this
contract and nothing else: to settle what its nodes have (``settle_site``), what a train job asks its
scheduler for beside the portable resources (``resources``: Slurm's tasks and GRES, the local platform's
GPUs from a pool Snakemake counts), to check what it needs before any job (``check``, ``check_run``: while
the workflow is read, so a dry run stops too, and ``note`` in a dry run for what only a real run checks),
to check what a real run needs when jobs are about to run (``before_jobs``: credentials, cores, nodes), to
add to what every job inherits (``exports``) and to clean up at the end (``close``). A train job asks it
how a run trains there: by ranks the job starts itself, given their devices (``devices_for``), or
submitted to a remote service (``submit``, remote rows only).
Each hook does nothing by default; a platform overrides the ones it needs. Every refusal is a
ConfigError (one line with a HINT), which the workflow prints once before it stops.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakeddp.errors import ConfigError, print_line
from snakeddp.platforms.table import Row

Runs = Mapping[str, Mapping[str, Any]]


class PreflightError(ConfigError):
    """Something the workflow cannot start with; the message says what and how to fix it."""


def note_instead(check: Callable[[], None]) -> None:
    """A dry run shows the plan whatever a real run would meet, and notes what it would stop on."""
    try:
        check()
    except ConfigError as error:
        print_line(f"Dry run; a real run would stop here: {error}")


@dataclass
class Invocation:
    """One invocation of the workflow, as snakeddp.workflow.plan read it."""

    config: dict[str, Any]  # validated; its site settled by the platform (settle_site)
    declared: Mapping[str, Any]  # the config as given, before defaults: a HINT's --config keeps it
    runs: Runs  # every run the config plans
    typed: bool  # the invocation the user typed, not the Snakemake a job runs inside
    resources: Any  # Snakemake's resource settings: which partition or queue each rule goes to
    train_rules: tuple[str, ...]  # the rules that train a run
    say: Callable[[str], None]  # a line on Snakemake's terminal while jobs run (its logger)
    provide: Callable[[str, int], None] = lambda name, amount: None  # a global resource Snakemake counts
    same_interpreter: bool = True  # jobs run Snakemake's interpreter (no --sdm conda or apptainer)
    memo: dict[str, Any] = field(default_factory=dict)  # what a platform learns once per invocation

    def remember(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


class Platform:
    """The contract. ``row`` is the platform's row of the table (snakeddp.platforms.TABLE)."""

    row: Row

    def settle_site(self, invocation: Invocation) -> dict[str, Any]:
        """The site section every job and rank reads (what the platform's nodes have)."""
        return dict(invocation.config["site"])

    def check(self, raw: Mapping[str, Any], config: Mapping[str, Any], runs: Runs, *, in_container: bool) -> None:
        """What the platform needs before any job: its client, its section, each run's request.
        ``in_container``: the rules run in --sdm apptainer's image."""

    def check_run(self, run_id: str, launch: Any) -> None:
        """One run's launch part (snakeddp.config.parts.Launch: config is a floor above this one), as this
        platform can start it."""

    def note(self, invocation: Invocation, to_train: Runs, cores: int | None) -> None:
        """A dry run's notes: what a real run would stop on, and what it would decide."""

    def resources(
        self, invocation: Invocation, launch_of: Callable[[Any], Any], accelerator_of: Callable[[Any], str]
    ) -> dict[str, Callable[[Any], Any]]:
        """What a train job (rules train and search_train) asks its scheduler for beside the portable
        resources (nodes, mem_mb, runtime): resource name -> its value for a job's wildcards (``launch_of``:
        the run's snakeddp.config.parts.Launch; ``accelerator_of``: cpu or gpu, auto resolved)."""
        return {}

    def before_jobs(self, invocation: Invocation, to_train: Runs, training: Runs, cores: int) -> None:
        """When jobs are about to run: ``to_train`` will train (or resume), ``training`` are those
        whose train jobs are pending now, ``cores`` what Snakemake may use."""

    def devices_for(self, devices: int, accelerator: str, env: Mapping[str, str]) -> dict[str, str]:
        """What a train job's ranks are given of the devices where it starts them (CUDA_VISIBLE_DEVICES), held
        while the job lives."""
        return {}

    def close(self, invocation: Invocation) -> None:
        """The workflow ended (success or error): nothing of the platform's may outlive it."""

    def exports(self, config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
        """What the platform adds to every job's environment, besides its section (which the workflow
        exports for every row that has one)."""
        return {}

    def path_first(self, env: Mapping[str, str], checkout: Path) -> list[str]:
        """Directories the jobs' PATH starts with (the workflow's interpreter's comes first anyway)."""
        return []

    def where_tried(self, env: Mapping[str, str]) -> dict[str, Any]:
        """Where a train job's ranks ran, as the platform says, asked by the job when its ranks are gone
        (snakeddp.run.tries): ``job_id``, ``nodes``, ``excluded_nodes`` (the nodes it was told to leave out)."""
        return {}

    def submit(self, args: argparse.Namespace) -> int:
        """A remote platform's train job: submit the run, follow it, fetch and check what it made."""
        raise NotImplementedError(f"the {self.row.name} platform starts its ranks itself")
