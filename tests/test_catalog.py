""".snakemake-workflow-catalog.yml says what the Snakemake workflow catalog's generator reads, of files that exist."""

from __future__ import annotations

import re

import yaml

from tests.helpers import REPO

CATALOG = REPO / ".snakemake-workflow-catalog.yml"
# What the catalog's generator (scripts/generate-catalog.py) reads under usage:, and the methods its page offers.
USAGE_KEYS = {"mandatory-flags", "software-stack-deployment", "report"}
DEPLOYMENT_METHODS = {"conda", "apptainer", "apptainer+conda"}


def test_it_parses_as_the_catalog_reads_it():
    usage = yaml.safe_load(CATALOG.read_text())["usage"]
    assert set(usage) == USAGE_KEYS
    assert set(usage["mandatory-flags"]) == {"desc", "flags"} and isinstance(usage["mandatory-flags"]["flags"], list)
    deployment = usage["software-stack-deployment"]
    assert set(deployment) == DEPLOYMENT_METHODS and all(isinstance(value, bool) for value in deployment.values())
    assert any(deployment.values()) and isinstance(usage["report"], bool)


def test_the_profiles_and_files_it_names_exist_and_the_standard_layout_is_there():
    text = CATALOG.read_text()
    profiles = re.findall(r"profiles/([a-z]+)", text)
    assert {"local", "slurm", "azureml", "spark", "databricks", "default"} <= set(profiles)
    for name in profiles:
        assert (REPO / "profiles" / name / "config.yaml").is_file(), name
    for path in re.findall(r"\b((?:config|docs|envs)/[\w./<>-]+\.(?:md|yaml))", text):
        assert list(REPO.glob(path.replace("<stage>", "*"))), path
    assert (REPO / "config" / "README.md").is_file() and (REPO / "Snakefile").is_file()
    assert (REPO / "envs" / "Dockerfile").is_file()
