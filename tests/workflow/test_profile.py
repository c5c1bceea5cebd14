"""snakeddp.workflow.profile: the profile(s) a command line uses, found as Snakemake finds them,
and a platform typed against the profile's."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakeddp.workflow.profile import ProfileConfig, ProfileError, check_platform, find


def profile(root: Path, name: str, text: str, file: str = "config.yaml") -> Path:
    (root / name).mkdir(parents=True)
    (root / name / file).write_text(text)
    return root / name


def test_the_profile_typed_by_path_or_name_gives_its_config_entries(tmp_path, monkeypatch):
    profile(
        tmp_path / "profiles", "slurm", "executor: slurm\nconfig:\n  - platform=slurm\n  - 'site={accelerator: gpu}'\n"
    )
    expected = ProfileConfig("profiles/slurm", ("platform=slurm", "site={accelerator: gpu}"))
    monkeypatch.chdir(tmp_path)
    for argv in (["--profile", "profiles/slurm", "-n"], ["-n", "--profile=profiles/slurm"]):
        assert find(argv, {}, tmp_path, tmp_path) == expected
    # By name, from Snakemake's user config directory, as `--profile slurm` after tools/setup.sh.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    profile(tmp_path / "home" / "snakemake", "azureml", "config:\n  platform: azureml\n", file="profile.yaml")
    assert find(["--profile", "azureml"], {}, tmp_path, tmp_path).entries == ("platform=azureml",)
    # $SNAKEMAKE_PROFILE stands in for --profile; `none` turns it off.
    assert find([], {"SNAKEMAKE_PROFILE": "azureml"}, tmp_path, tmp_path).entries == ("platform=azureml",)
    assert find(["--profile", "none"], {"SNAKEMAKE_PROFILE": "azureml"}, tmp_path, tmp_path).entries == ()


def test_the_last_profile_with_a_config_wins_and_the_workflow_profile_comes_last(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    profile(tmp_path, "a", "config:\n  - platform=slurm\n")
    profile(tmp_path, "b", "jobs: 3\n")
    assert find(["--profile", "a", "--profile", "b"], {}, tmp_path, tmp_path).entries == ("platform=slurm",)
    profile(tmp_path / "profiles", "default", "config:\n  - seed=7\n")
    assert find(["--profile", "a"], {}, tmp_path, tmp_path).entries == ("seed=7",)
    assert find(["--profile", "a", "--workflow-profile", "none"], {}, tmp_path, tmp_path).entries == ("platform=slurm",)


def test_a_platform_typed_against_the_profiles_is_refused_with_a_hint():
    slurm = ProfileConfig("slurm", ("platform=slurm",))
    check_platform(slurm, {"platform": "slurm"}, {"platform": "slurm", "seed": 1})
    check_platform(slurm, {"platform": "slurm"}, {"seed": 1})
    check_platform(ProfileConfig(None, ()), {}, {"platform": "azureml"})
    with pytest.raises(ProfileError) as refused:
        check_platform(slurm, {"platform": "slurm"}, {"platform": "local"})
    assert str(refused.value) == (
        "platform: local was given on the command line (--config or --configfile), and --profile slurm runs on "
        "platform slurm. HINT: leave platform out of --config and your config files (the profile sets it), or run "
        "with --profile local."
    )
