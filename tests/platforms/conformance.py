"""What every platform must give, checked through `snakemake --profile PROFILE` as typed (as Snakemake's
executor plugins are checked against snakemake-interface-executor-plugins' TestWorkflowsBase).

A platform's test module subclasses ``Conformance``, says how to reach it (``profile``: a profile folder
in the checkout; ``environment``: what the platform needs around Snakemake) and what it refuses before any
job (``refused``: a --config override and the words its one line says), and gets the checks below. The
pipeline runs once per class (``finished``), its rerun and its refusal once more each: the checks share them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import ClassVar

import pytest

from tests.checkout import Checkout, error_lines
from tests.helpers import TINY, assert_valid_provenance, left_running, subprocess_env


@dataclass
class Finished:
    """The tiny pipeline's first run, its rerun and a refused run, in one checkout."""

    checkout: Checkout
    first: CompletedProcess
    again: CompletedProcess
    refused: CompletedProcess


class Conformance:
    """The checks every platform passes. A subclass sets the class attributes and may override the hooks
    (class methods: the run they make is the class's, shared by its tests)."""

    #: The platform's name, as its row and provenance give it.
    platform: ClassVar[str]
    #: A --config override the platform refuses before any job, and words its refusal's line says.
    refused_config: ClassVar[str]
    refused_says: ClassVar[str]
    #: The variable provenance records of the node the platform placed rank 0 on, and its value there.
    node_variable: ClassVar[str | None] = None

    @classmethod
    def profile(cls, checkout: Checkout) -> Path:
        """The profile `snakemake --profile` is given: the checkout's profiles/PLATFORM by default."""
        return checkout.root / "profiles" / cls.platform

    @classmethod
    def environment(cls, checkout: Checkout) -> dict[str, str]:
        """The environment Snakemake is started in."""
        return subprocess_env()

    @pytest.fixture(scope="class")
    @classmethod
    def finished(cls, tmp_path_factory: pytest.TempPathFactory) -> Finished:
        checkout = Checkout(tmp_path_factory.mktemp(cls.platform))
        checkout.write_config(TINY)
        profile, env = str(cls.profile(checkout)), cls.environment(checkout)
        first = checkout.snakemake("--profile", profile, env=env)
        assert first.returncode == 0, first.stdout[-5000:]
        again = checkout.snakemake("--profile", profile, env=env)
        refused = checkout.snakemake("--profile", profile, "--config", cls.refused_config, env=env)
        return Finished(checkout, first, again, refused)

    def test_provenance_names_the_platform_and_its_hosts(self, finished: Finished) -> None:
        (record,) = assert_valid_provenance(finished.checkout.root / "results")
        variables = record["launch"]["variables"]
        assert variables["SNAKEDDP_PLATFORM"] == self.platform
        ranks = record["launch"]["ranks"]
        assert ranks and all(rank["host"] for rank in ranks), json.dumps(ranks)
        if self.node_variable is not None:
            assert all(rank["node"] == variables[self.node_variable] for rank in ranks), json.dumps(ranks)

    def test_a_rerun_has_nothing_to_do(self, finished: Finished) -> None:
        assert finished.again.returncode == 0, finished.again.stdout[-3000:]
        assert "Nothing to be done" in finished.again.stdout, finished.again.stdout[-3000:]

    def test_a_refused_run_stops_in_one_line_with_a_hint(self, finished: Finished) -> None:
        assert finished.refused.returncode != 0
        lines = error_lines(finished.refused.stdout)
        assert len(lines) == 1 and self.refused_says in lines[0], finished.refused.stdout[-3000:]

    def test_nothing_is_left_running(self, finished: Finished) -> None:
        assert left_running(finished.checkout.root, within=10) == []
