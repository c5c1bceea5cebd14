"""snakeddp.platforms: one row per platform, and everything else that names platforms agrees with it
(the schema's enum, the profiles, the launchers); each row's contract imports and is that row's."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from snakeddp import cluster, platforms
from snakeddp.config.schema import load_schema
from snakeddp.config.schema import platforms as schema_platforms
from snakeddp.contract import Platform, RemotePlatform
from tests.helpers import REPO


def test_the_schemas_platforms_are_the_tables_rows_and_validation_takes_every_registered_one():
    assert schema_platforms() == tuple(row.name for row in platforms.TABLE)
    assert load_schema()["properties"]["platform"]["enum"] == list(platforms.names())


@pytest.mark.parametrize("row", platforms.TABLE, ids=lambda row: row.name)
def test_each_rows_contract_its_launchers_section_and_profile_exist(row):
    contract = platforms.load(row.name)
    assert isinstance(contract, Platform) and contract.row is row
    assert {row.default_launcher, *row.own_launchers} <= set(cluster.by_name())
    assert cluster.for_platform("auto", row.name).name == row.default_launcher
    if row.section is not None:
        assert row.section in load_schema()["properties"]
    profile = yaml.safe_load((REPO / "profiles" / row.name / "config.yaml").read_text())
    assert f"platform={row.name}" in profile["config"]
    # A remote contract's train job submits; the others start their ranks and have nothing to submit.
    assert isinstance(contract, RemotePlatform) is contract.remote is hasattr(contract, "submit")


def test_a_launcher_a_platform_owns_is_refused_elsewhere_and_an_only_own_platform_takes_no_other():
    for row in platforms.TABLE:
        for launcher in cluster.by_name():
            owners = platforms.homes(launcher)
            allowed = (not owners or row in owners) and (not row.only_own_launchers or launcher in row.own_launchers)
            if allowed:
                assert cluster.for_platform(launcher, row.name).name == launcher
                continue
            with pytest.raises(cluster.LaunchError, match=r"HINT: ") as refused:
                cluster.for_platform(launcher, row.name)
            # As its HINT says: auto, the platform's own launcher, is taken.
            assert "set launch.launcher: auto" in str(refused.value)
            assert cluster.for_platform("auto", row.name).name == row.default_launcher


def test_setup_links_a_profile_for_every_row_and_none_other(tmp_path):
    done = subprocess.run(
        [str(REPO / "tools" / "profiles.sh")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    linked = {link.name: link.resolve() for link in (tmp_path / "snakemake").iterdir()}
    assert linked == {row.name: REPO / "profiles" / row.name for row in platforms.TABLE}, done.stdout


def test_an_unknown_platform_is_one_line_naming_the_profiles():
    with pytest.raises(platforms.ConfigError, match=r"^unknown platform 'k8s'\. HINT: .*local, slurm"):
        platforms.row("k8s")


@pytest.mark.parametrize("row", platforms.TABLE, ids=lambda row: row.name)
def test_each_rows_job_side_names_launchers_its_row_owns(row):
    side = platforms.job_side(row.name)
    assert isinstance(side, platforms.JobSide)
    for name in side.launchers:
        assert cluster.by_name()[name].name == name
        assert row in platforms.homes(name), f"{row.name}'s job side runs {name}, which its row does not own"


def test_every_job_side_is_light_to_import():
    """Ranks and the Snakefile import every platform's job side (snakeddp.platforms asks them all): none
    imports a launcher, an SDK or torch until it is asked for one."""
    probe = (
        "import sys\nfrom snakeddp import platforms\n"
        "platforms.recorded_names(); platforms.scheduler_node({}); platforms.multi_node()\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning', 'pyspark', 'azure',"
        " 'databricks') or m.startswith(('snakeddp.cluster', 'snakeddp.workflow')))\n"
        "print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
