"""An ``Invocation`` as snakeddp.workflow.plan builds it (the parts made once), for tests that call one platform
hook on a config without reading a whole workflow."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from snakeddp import platforms
from snakeddp.config import parts
from snakeddp.config import schema as config_schema
from snakeddp.contract import Invocation, Runs


def invocation(
    config: dict[str, Any],
    runs: Runs,
    platform: str | None = None,
    *,
    typed: bool = True,
    declared: Mapping[str, Any] | None = None,
    say: Callable[[str], None] = print,
) -> Invocation:
    """The invocation of ``platform`` (else the config's) planning ``runs``, each a run as RUNS holds it."""
    row = platforms.row(platform or config["platform"])
    return Invocation(
        config=config,
        declared=config if declared is None else declared,
        runs=runs,
        typed=typed,
        resources=None,
        train_rules=("train",),
        say=say,
        state=platforms.load(row.name).new_state(),
        site=parts.Site.of(config["site"]),
        launches={run_id: parts.Launch.of(run["config"]["launch"]) for run_id, run in runs.items()},
        trainers={run_id: parts.Trainer.of(run["config"]["trainer"]) for run_id, run in runs.items()},
        settings=config_schema.settings_part(row).of(config[row.section]) if row.section else None,
    )
