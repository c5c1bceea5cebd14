"""snakeddp.contract: what a platform must answer is abstract, its state typed, remote its class."""

from __future__ import annotations

import dataclasses
import re

import pytest

from snakeddp import platforms
from snakeddp.contract import Invocation, Platform, RemotePlatform, Stateless
from snakeddp.errors import ConfigError


class Checks(Platform[Stateless]):
    row = platforms.row("local")

    def check(self, invocation: Invocation[Stateless]) -> None:
        pass


def test_a_platform_that_does_not_say_what_it_checks_cannot_be_made():
    class Silent(Platform[Stateless]):
        row = platforms.row("local")

    with pytest.raises(TypeError, match="abstract method.*check"):
        Silent()
    assert Checks().remote is False and not hasattr(Checks(), "submit")


def test_a_remote_platform_must_say_how_it_submits_and_is_remote_by_its_class():
    class NoSubmit(RemotePlatform[Stateless]):
        row = platforms.row("local")

        def check(self, invocation: Invocation[Stateless]) -> None:
            pass

    with pytest.raises(TypeError, match="abstract method.*submit"):
        NoSubmit()

    class Submits(NoSubmit):
        def submit(self, args):
            return 0

    assert Submits().remote is True


@pytest.mark.parametrize("name", platforms.names())
def test_each_platforms_state_is_a_fresh_dataclass_per_invocation(name):
    contract = platforms.load(name)
    first, second = contract.new_state(), contract.new_state()
    assert dataclasses.is_dataclass(first) and first is not second and first == second
    # A fresh state knows nothing yet: every field has its default.
    assert all(field.default is not dataclasses.MISSING for field in dataclasses.fields(first))


def test_an_invocation_hands_its_platform_the_settings_part_its_row_names_and_refuses_another():
    """A platform reads its section as its package's part (its row's settings); asked as another part, the
    invocation says which it holds, in one line with a HINT naming the row's field."""
    from snakeddp import config
    from snakeddp.databricks.settings import Settings as DatabricksSettings
    from snakeddp.spark.settings import Settings as SparkSettings
    from tests.platforms.invocations import invocation

    validated = config.validate({"platform": "spark", "spark": {"master": "local[2]"}})
    handed = invocation(validated, config.expand_sweep(validated, source="test"))
    assert handed.settings_as(SparkSettings).master == "local[2]"
    said = "the invocation's platform settings are snakeddp.spark.settings.Settings, not snakeddp.databricks."
    with pytest.raises(ConfigError, match=f"^{re.escape(said)}settings.Settings. HINT: name snakeddp.databricks"):
        handed.settings_as(DatabricksSettings)
    local = config.validate({})
    assert invocation(local, config.expand_sweep(local, source="test")).settings is None
