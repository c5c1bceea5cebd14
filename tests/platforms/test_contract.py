"""snakeddp.contract: what a platform must answer is abstract, its state typed, remote its class."""

from __future__ import annotations

import dataclasses

import pytest

from snakeddp import platforms
from snakeddp.contract import Invocation, Platform, RemotePlatform, Stateless


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
