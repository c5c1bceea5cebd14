"""What every platform must give, checked through `snakemake --profile PROFILE` as typed (as Snakemake's
executor plugins are checked against snakemake-interface-executor-plugins' TestWorkflowsBase).

A platform's test module subclasses ``Conformance``, says what its platform is called (``platform``, and
``ranks_as`` where its jobs' ranks run as another's), the words of a refusal before any job
(``refused_says``) and the variable naming rank 0's node, and supplies the fixture ``finished``: the state
its own tests already build (a pipeline finished through the platform's profile, the same command typed
again, and a refused one). The checks only read it: a module pays for no run of its own for them (each
`snakemake` that trains costs 20+ s of CPU). ``pipeline`` builds that state for a module that has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import ClassVar

from tests.checkout import Checkout, error_lines
from tests.helpers import TINY, assert_valid_provenance, left_running


@dataclass
class Finished:
    """A working directory where the pipeline finished on the platform, the same command typed again there,
    and a run the platform refused before any job."""

    directory: Path
    again: CompletedProcess
    refused: CompletedProcess


def pipeline(
    checkout: Checkout, profile: Path, env: dict[str, str], refused_config: str, config: tuple[str, ...] = ()
) -> Finished:
    """The tiny pipeline typed in ``checkout`` with ``profile`` (and ``config``: --config values every time),
    typed again, and typed with a --config override the platform refuses."""
    checkout.write_config(TINY)
    given = ("--config", *config) if config else ()
    first = checkout.snakemake("--profile", str(profile), *given, env=env)
    assert first.returncode == 0, first.stdout[-5000:]
    again = checkout.snakemake("--profile", str(profile), *given, env=env)
    refused = checkout.snakemake("--profile", str(profile), "--config", *config, refused_config, env=env)
    return Finished(checkout.root, again, refused)


class Conformance:
    """The checks every platform passes; the module supplies ``finished``."""

    #: The platform's name, as its row and profile give it.
    platform: ClassVar[str]
    #: The platform its jobs' ranks run as, which provenance records (its row's ``ranks_as``), if another.
    ranks_as: ClassVar[str | None] = None
    #: Words the refusal's one line says.
    refused_says: ClassVar[str]
    #: The variable provenance records of the node the platform placed rank 0 on, and its value there.
    node_variable: ClassVar[str | None] = None

    def test_provenance_names_the_platform_and_its_hosts(self, finished: Finished) -> None:
        records = assert_valid_provenance(finished.directory / "results")
        for record in records:
            variables = record["launch"]["variables"]
            assert variables["SNAKEDDP_PLATFORM"] == (self.ranks_as or self.platform)
            ranks = record["launch"]["ranks"]
            assert ranks and all(rank["host"] for rank in ranks), json.dumps(ranks)
            if self.node_variable is not None:
                (first,) = [rank for rank in ranks if rank["rank"] == 0]
                assert first["node"] == variables[self.node_variable], json.dumps(ranks)

    def test_a_rerun_has_nothing_to_do(self, finished: Finished) -> None:
        said = finished.again.stdout + (finished.again.stderr or "")
        assert finished.again.returncode == 0, said[-3000:]
        assert "Nothing to be done" in said, said[-3000:]

    def test_a_refused_run_stops_in_one_line_with_a_hint(self, finished: Finished) -> None:
        said = finished.refused.stdout + (finished.refused.stderr or "")
        assert finished.refused.returncode != 0
        lines = error_lines(said)
        assert len(lines) == 1 and self.refused_says in lines[0] and "HINT: " in lines[0], said[-3000:]

    def test_nothing_is_left_running(self, finished: Finished) -> None:
        assert left_running(finished.directory, within=10) == []
