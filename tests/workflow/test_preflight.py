"""Pieces of the workflow's early checks that the end-to-end tests (tests/e2e/test_preflight.py) cannot reach."""

from __future__ import annotations

import pytest

from snakeddp.config import ConfigError
from snakeddp.run import requirements
from snakeddp.workflow import preflight


def test_module_file_is_found_without_importing_its_package(tmp_path):
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "model.py").write_text("raise RuntimeError('imported')\n")
    assert preflight.module_file("userpkg.model", [str(tmp_path)]) == package / "model.py"
    assert preflight.module_file("userpkg.missing", [str(tmp_path)]) is None
    assert preflight.module_file("userpkg.model.deeper", [str(tmp_path)]) is None


def test_an_enabled_tracker_needs_its_package_and_disabling_it_is_enough(monkeypatch):
    monkeypatch.setitem(requirements.TRACKER_PACKAGES, "wandb", "snakeddp_not_installed_tracker")
    with pytest.raises(ConfigError, match=r"tracking.wandb.enabled is true but the snakeddp_not_installed_tracker "
                       r"package is not installed.*HINT: .* set tracking.wandb.enabled: false"):  # fmt: skip
        preflight.check_trackers({"wandb": {"enabled": True}})
    preflight.check_trackers({"wandb": {"enabled": False}})
