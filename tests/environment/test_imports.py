"""What the set-up imports for the packages a user added (snakeddp.environment.imports), read in this venv."""

from __future__ import annotations

import importlib.metadata

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
