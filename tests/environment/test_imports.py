"""What the set-up imports for the packages a user added (snakeddp.environment.imports), read in this venv."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from snakeddp.environment.imports import config_modules, package_modules


def test_the_modules_of_added_packages_are_those_installed_not_every_name_their_wheels_list(tmp_path):
    # azure-identity's top_level.txt lists `images`, which it never installs; importing it failed the set-up
    # after `tools/add.sh azure-ai-ml azure-identity`, the azureml HINT's command.
    listed = importlib.metadata.distribution("azure-identity").read_text("top_level.txt").split()
    assert "images" in listed
    requirements = tmp_path / "requirements.in"
    requirements.write_text("azure-identity==1.27.0  # stages: train\nadlfs==2026.8.0  # stages: data\n")
    assert package_modules(requirements) == ["adlfs", "azure"]


def test_the_users_modules_are_read_from_either_spelling_of_the_config(tmp_path):
    ours, lightning = tmp_path / "ours.yaml", tmp_path / "lightning.yaml"
    ours.write_text("model: {target: 'examples.tabular.model:TabularNet'}\ndata: {module: 'pkg.data:Tables'}\n")
    lightning.write_text(
        "model: {class_path: examples.tabular.model.TabularNet}\ndata: {class_path: pkg.data.Tables}\n"
    )
    assert config_modules(lightning) == config_modules(ours) == ["examples.tabular.model", "pkg.data"]


def test_the_check_imports_without_collections_and_leaves_the_imports_frozen_and_the_collector_on(tmp_path):
    """As the stages' entry points import (snakeddp.util.shutdown): a collection during the imports walks
    everything they made and finds nothing, and so does the one at exit (about 2 s of each set-up's check)."""
    (tmp_path / "probe.py").write_text("import gc\nCOLLECTING = gc.isenabled()\n\n\nclass Model:\n    pass\n")
    (tmp_path / "config.yaml").write_text("model: {target: 'probe:Model'}\n")
    (tmp_path / "requirements.in").write_text("")
    script = (
        "import gc, sys; from snakeddp.environment import imports; imports.STAGE_MODULES = ()\n"
        "code = imports.main(['--config', 'config.yaml', '--requirements', 'requirements.in'])\n"
        "print(code, sys.modules['probe'].COLLECTING, gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["setup: imports work: probe", "0 False True True"], done.stdout + done.stderr
