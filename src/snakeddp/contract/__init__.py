"""What every platform implements, and what the workflow hands it.

The workflow (the Snakefile's PLAN: snakeddp.workflow.plan) asks the platform of its profile, through this
contract and nothing else, each hook given the one ``Invocation``: to settle what its nodes have
(``settle_site``), what a train job asks its scheduler for beside the portable resources (``resources``:
Slurm's tasks and GRES, the local platform's GPUs from a pool Snakemake counts), to check what it needs
before any job (``check``, ``check_run``: while the workflow is read, so a dry run stops too, and ``note`` in
a dry run for what only a real run checks), to check what a real run needs when jobs are about to run
(``before_jobs``: credentials, cores, nodes) and to clean up at the end (``close``). What every job inherits
(``exports``, ``path_first``) is a function of the config and Snakemake's environment alone. A train job asks
it how a run trains there: by ranks the job starts itself, given their devices (``devices_for``), or
submitted to a remote service (``RemotePlatform.submit``: a contract of that class is remote).

The ``Invocation`` carries the typed parts the plan built once (snakeddp.config.parts): the settled ``site``,
each run's ``launches`` and ``trainers``, and the platform's own ``settings`` (the part its package defines
for its section); a platform reads those, and never builds them again from the config's dicts.

``check`` is abstract (every platform checks its section and each run's request, if only to say it has
none to check), as is a remote platform's ``submit``; the other hooks do nothing by default. What a platform
learns once per invocation is its ``State``, a dataclass of typed fields made with the invocation
(``Invocation.state``). Every refusal is a ConfigError (one line with a HINT), which the workflow prints
once before it stops.

It sits above ``config`` (its hooks take parts), while the registry that finds a platform's contract by name
(``snakeddp.platforms``) stays below it: lower floors ask the registry, never a contract.

May import: ``compat``, ``config``, ``errors``, ``forking``, ``platforms``, ``util`` (the floors below its own:
tests/test_floors.py).
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from snakeddp.config import parts
from snakeddp.errors import ConfigError, print_line
from snakeddp.platforms.table import Row

#: A validated config section as a dict (what the run's identity hashes and jobs are handed).
Section = dict[str, Any]
Runs = Mapping[str, Section]
State = TypeVar("State")
S = TypeVar("S", bound=parts.Settings)
#: A job's wildcards as Snakemake hands them to an input function or resource (its own class).
Wildcards = object


class PreflightError(ConfigError):
    """Something the workflow cannot start with; the message says what and how to fix it."""


def note_instead(check: Callable[[], None]) -> None:
    """A dry run shows the plan whatever a real run would meet, and notes what it would stop on."""
    try:
        check()
    except ConfigError as error:
        print_line(f"Dry run; a real run would stop here: {error}")


@dataclass
class Invocation(Generic[State]):
    """One invocation of the workflow, as snakeddp.workflow.plan read it."""

    config: Section  # validated; its site settled by the platform (settle_site)
    declared: Mapping[str, object]  # the config as given, before defaults: a HINT's --config keeps it
    runs: Runs  # every run the config plans
    typed: bool  # the invocation the user typed, not the Snakemake a job runs inside
    resources: object  # Snakemake's resource settings: which partition or queue each rule goes to
    train_rules: tuple[str, ...]  # the rules that train a run
    say: Callable[[str], None]  # a line on Snakemake's terminal while jobs run (its logger)
    state: State  # what the platform learns once per invocation (its contract's State)
    site: parts.Site  # the site section; the one the platform settled once settle_site answered
    launches: Mapping[str, parts.Launch]  # each run's launch part, by run id
    trainers: Mapping[str, parts.Trainer]  # each run's trainer part, by run id
    settings: parts.Settings | None = None  # the platform's own section, as its package's part (None: it has none)
    provide: Callable[[str, int], None] = lambda name, amount: None  # a global resource Snakemake counts
    same_interpreter: bool = True  # jobs run Snakemake's interpreter (no --sdm conda or apptainer)
    in_container: bool = False  # the rules run in --sdm apptainer's image
    pending: frozenset[str] = frozenset()  # the rules of the jobs about to run (set at onstart, before before_jobs)

    def settings_as(self, kind: type[S]) -> S:
        """The platform's own settings, as its package's part ``kind``."""
        if not isinstance(self.settings, kind):
            held = "none" if self.settings is None else _named(type(self.settings))
            raise ConfigError(
                f"the invocation's platform settings are {held}, not {_named(kind)}. HINT: name "
                f"{kind.__module__}:{kind.__qualname__} as the platform's row's settings (snakeddp.platforms.table)."
            )
        return self.settings


def _named(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


@dataclass
class Stateless:
    """The state of a platform that learns nothing once per invocation."""


class Platform(ABC, Generic[State]):
    """The contract. ``row`` is the platform's row of the table (snakeddp.platforms.TABLE)."""

    row: Row
    #: A train job submits the run to a service and follows it (RemotePlatform), rather than starting its ranks.
    remote: ClassVar[bool] = False

    def new_state(self) -> State:
        """What the platform will learn once per invocation, not known yet (a dataclass of typed fields)."""
        return Stateless()  # type: ignore[return-value]

    def settle_site(self, invocation: Invocation[State]) -> Section:
        """The site section every job and rank reads (what the platform's nodes have)."""
        return dict(invocation.config["site"])

    @abstractmethod
    def check(self, invocation: Invocation[State]) -> None:
        """What the platform needs before any job: its client, its section, each run's request."""

    def check_run(self, invocation: Invocation[State], run_id: str, launch: parts.Launch) -> None:
        """One run's launch part, as this platform can start it."""

    def note(self, invocation: Invocation[State], to_train: Runs, cores: int | None) -> None:
        """A dry run's notes: what a real run would stop on, and what it would decide."""

    def resources(
        self,
        invocation: Invocation[State],
        launch_of: Callable[[Wildcards], parts.Launch],
        accelerator_of: Callable[[Wildcards], str],
    ) -> dict[str, Callable[[Wildcards], object]]:
        """What a train job (rules train and search_train) asks its scheduler for beside the portable
        resources (nodes, mem_mb, runtime): resource name -> its value for a job's wildcards (``launch_of``:
        the run's launch part; ``accelerator_of``: cpu or gpu, auto resolved)."""
        return {}

    def before_jobs(self, invocation: Invocation[State], to_train: Runs, training: Runs, cores: int) -> None:
        """When jobs are about to run: ``to_train`` will train (or resume), ``training`` are those
        whose train jobs are pending now, ``cores`` what Snakemake may use."""

    def close(self, invocation: Invocation[State]) -> None:
        """The workflow ended (success or error): nothing of the platform's may outlive it."""

    def exports(self, config: Mapping[str, object], env: Mapping[str, str]) -> dict[str, str]:
        """What the platform adds to every job's environment, besides its section (which the workflow
        exports for every row that has one)."""
        return {}

    def path_first(self, env: Mapping[str, str], checkout: Path) -> list[str]:
        """Directories the jobs' PATH starts with (the workflow's interpreter's comes first anyway)."""
        return []

    def devices_for(self, devices: int, accelerator: str, env: Mapping[str, str]) -> dict[str, str]:
        """What a train job's ranks are given of the devices where it starts them (CUDA_VISIBLE_DEVICES), held
        while the job lives."""
        return {}

    def where_tried(self, env: Mapping[str, str]) -> Section:
        """Where a train job's ranks ran, as the platform says, asked by the job when its ranks are gone
        (snakeddp.run.tries): ``job_id``, ``nodes``, ``excluded_nodes`` (the nodes it was told to leave out)."""
        return {}


class RemotePlatform(Platform[State]):
    """A platform whose train job submits the run to a service, follows it, and fetches and checks what it
    made (snakeddp.remote.job.RemoteJob owns that sequence), instead of starting the ranks itself."""

    remote = True

    @abstractmethod
    def submit(self, args: argparse.Namespace) -> int:
        """A train job: submit the run, follow it, fetch and check what it made; the job's exit status."""
