"""snakeddp.compat: one table of the releases each private hook was read against, checked when its module
is imported, and pyproject.toml's ranges the same as the table's."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from snakeddp import compat
from snakeddp.environment import advisories
from snakeddp.errors import ConfigError, UpstreamVersionError
from tests.helpers import REPO, subprocess_env

HOOK_MODULES = {
    "lightning": "snakeddp.compat.lightning",
    "snakemake": "snakeddp.compat.snakemake",
    "snakemake-executor-plugin-slurm": "snakeddp.compat.snakemake_executor_plugin_slurm",
    "azure-ai-ml": "snakeddp.compat.azure_ai_ml",
    "azureml-core": "snakeddp.compat.azureml_core",
}


def declared() -> dict[str, SpecifierSet]:
    """Every requirement of pyproject.toml (dependencies and extras) by package name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *(line for extra in project["optional-dependencies"].values() for line in extra)]
    return {(req := Requirement(line)).name: req.specifier for line in lines}


@pytest.mark.parametrize("hook", sorted(compat.WRITTEN_FOR))
def test_pyproject_allows_exactly_the_releases_each_hook_was_written_for(hook):
    written = compat.WRITTEN_FOR[hook]
    if written.optional:  # narrower by design: the locked release, left out on the rest of the range
        installed = importlib.metadata.version(written.package)
        assert installed in SpecifierSet(written.versions) and installed in declared()[written.package]
    else:
        # The same ceiling; the floor may be higher where envs/denied.toml denies the first releases read.
        ranges, read = declared()[written.package], SpecifierSet(written.versions)
        assert {c for c in ranges if c.operator.startswith("<")} == {c for c in read if c.operator.startswith("<")}
        floors = [Version(c.version) for c in ranges if c.operator == ">="]
        assert floors and all(Version(c.version) <= min(floors) for c in read if c.operator == ">="), written
        denied = [d for d in advisories.load() if d.package == written.package]
        assert ranges == read or denied, f"{written}: the range is narrower than what was read, and nothing is denied"


def test_an_optional_hook_on_a_release_nobody_read_is_left_out_not_refused():
    assert compat.check("params_change_words", version="9.27.1") is True
    assert compat.check("params_change_words", version="9.20.0") is False
    assert compat.check("report_before_a_run", version="9.0.0") is False
    compat.check_package("snakemake", version="9.0.0")  # the required hooks were read for 9.0.0


# azureml-core is installed in .venv-azureml-v1 only (tests/azureml/test_sdk_v1.py runs its row there).
INSTALLED_HOOKS = [
    pytest.param(hook, marks=pytest.mark.azureml_v1) if written.package == "azureml-core" else hook
    for hook, written in sorted(compat.WRITTEN_FOR.items())
]


@pytest.mark.parametrize("hook", INSTALLED_HOOKS)
def test_the_installed_releases_are_ones_the_hooks_were_written_for(hook):
    compat.check(hook)
    written = compat.WRITTEN_FOR[hook]
    assert importlib.metadata.version(written.package) in SpecifierSet(written.versions)


@pytest.mark.parametrize(
    ("hook", "version"),
    [("sigterm_broadcast", "2.7.0"), ("last_checkpoint", "2.5.6"), ("scheduler_timers", "9.28.0"),
     ("profile_config", "8.30.0"), ("job_yaml", "1.36.0"), ("output_data", "1.62.0")],
)  # fmt: skip
def test_a_release_the_hook_was_not_written_for_is_refused_in_one_line_with_a_hint(hook, version):
    written = compat.WRITTEN_FOR[hook]
    with pytest.raises(UpstreamVersionError) as refused:
        compat.check(hook, version=version)
    message = str(refused.value)
    assert message.startswith(f"snakeddp.compat: {hook} was written for {written.package}{written.versions}, ")
    assert f"found {version}. HINT: install the pinned environment" in message
    assert written.source in message and "\n" not in message
    # One of the errors every entry point ends as one line (snakeddp.errors.exit_code).
    assert isinstance(refused.value, ConfigError)


def test_every_release_read_passes_and_a_package_is_checked_for_all_its_hooks():
    for version in ("2.6.0", "2.6.1", "2.6.4", "2.6.5", "2.6.6"):
        compat.check_package("lightning", version=version)
    for version in ("9.0.0", "9.10.0", "9.27.1"):
        compat.check_package("snakemake", version=version)
    with pytest.raises(UpstreamVersionError, match=r"^snakeddp.compat: sigterm_broadcast .* found 2\.6\.7\. HINT"):
        compat.check_package("lightning", version="2.6.7")


def test_a_package_that_is_not_installed_is_named_with_a_hint():
    with pytest.raises(UpstreamVersionError, match=r"needs no-such-package, which is not installed here\. HINT"):
        compat.installed_version("no-such-package")


def test_every_hook_module_checks_its_package_and_every_package_has_one():
    assert set(HOOK_MODULES) == {written.package for written in compat.WRITTEN_FOR.values()}
    for package, module in HOOK_MODULES.items():
        source = (REPO / "src" / f"{module.replace('.', '/')}.py").read_text()
        assert f'check_package("{package}"' in source, module


def test_private_attributes_of_upstream_objects_are_reached_only_in_compat():
    """The hooks themselves (a `._name` of an upstream object) appear in snakeddp.compat and nowhere else."""
    hooks = ("_broadcast_sigterm_tensor", "_sigterm_notifier_fn", "_signal_connector", "_save_last_checkpoint",
             "_monitor_candidates", "_should_save_on_train_epoch_end", "_schedule_reevalutation", "_to_job",
             "_to_output_data", "overwrite_config", "check_envvars", "ParamsChange")  # fmt: skip
    places = [*(REPO / "src" / "snakeddp").rglob("*.py"), REPO / "Snakefile", *(REPO / "rules").glob("*.smk")]
    places += list((REPO / "scripts").glob("*.py"))
    outside = {
        (path.relative_to(REPO).as_posix(), hook)
        for path in places
        if "compat" not in path.parts
        for hook in hooks
        if re.search(rf"(?<!\w){hook}(?!\w)", path.read_text())  # a name, not a part of one (pass_on_to_jobs)
    }
    assert not outside


def test_compat_imports_no_upstream_package_of_its_own():
    """The table and the Snakemake hooks are cheap: neither imports torch, Lightning or Snakemake."""
    code = (
        "import sys\n"
        "import snakeddp.compat, snakeddp.compat.snakemake\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'snakemake'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), check=True
    )
    assert done.stdout.strip() == "[]"


def snakemake_settings(typed: list[str], configfiles: tuple = ()) -> SimpleNamespace:
    """A workflow with Snakemake's own ConfigSettings, as its command line builds them from ``typed``."""
    from snakemake.cli import parse_config
    from snakemake.settings.types import ConfigSettings

    settings = ConfigSettings(config=parse_config(typed), configfiles=configfiles, config_args=typed or None)
    return SimpleNamespace(config_settings=settings)


def test_the_profile_config_holds_under_a_typed_config_for_this_process_and_the_jobs_it_spawns():
    from snakemake.cli import parse_config

    from snakeddp.compat.snakemake import keep_profile_config

    profile = ("platform=slurm", "site={accelerator: gpu, gpu_type: a100}")
    workflow = snakemake_settings(["model={lr: 0.01}", "site={gpu_type: h100}"])
    mine, typed = keep_profile_config(workflow, profile)
    assert mine == {"platform": "slurm", "site": {"accelerator": "gpu", "gpu_type": "a100"}}
    # Nested values stay strings, as Snakemake parses them (snakeddp.config.coerce types them).
    assert typed == {"model": {"lr": "0.01"}, "site": {"gpu_type": "h100"}}
    expected = {"platform": "slurm", "site": {"accelerator": "gpu", "gpu_type": "h100"}, "model": {"lr": "0.01"}}
    assert workflow.config_settings.overwrite_config == expected
    # What Snakemake passes to the jobs it spawns (--config ARGS) parses to the same.
    assert parse_config(workflow.config_settings.config_args) == expected


def test_a_profile_config_alone_is_nothing_typed_and_is_set_aside_while_the_config_file_loads(tmp_path):
    from snakeddp.compat.snakemake import keep_profile_config, put_back_profile_config, set_aside_profile_config

    profile = ("platform=azureml",)
    # Snakemake took the profile's list as the default of --config: the same list, nothing typed.
    workflow = snakemake_settings(list(profile))
    mine, typed = keep_profile_config(workflow, profile)
    assert (mine, typed) == ({"platform": "azureml"}, {})
    aside = set_aside_profile_config(workflow, typed)
    assert (aside, workflow.config_settings.overwrite_config) == ({"platform": "azureml"}, {})
    config = {"platform": "local", "seed": 1}
    put_back_profile_config(workflow, config, aside)
    assert config == {"platform": "azureml", "seed": 1}
    assert workflow.config_settings.overwrite_config == {"platform": "azureml"}

    # A --configfile is typed config: its keys count, and the notice about it stays Snakemake's.
    mine_file = tmp_path / "mine.yaml"
    mine_file.write_text("platform: local\nseed: 3\n")
    workflow = snakemake_settings(list(profile), configfiles=(mine_file,))
    mine, typed = keep_profile_config(workflow, profile)
    assert typed == {"platform": "local", "seed": 3}
    assert set_aside_profile_config(workflow, typed) == {}


def test_linting_is_the_build_without_environment_checks():
    from snakeddp.compat.snakemake import linting

    assert linting(SimpleNamespace(check_envvars=False))
    assert not linting(SimpleNamespace(check_envvars=True))


def test_the_checkpoint_hooks_public_names_are_new_to_lightning(tmp_path):
    """A name that ModelCheckpoint already has (save_last is one of its settings) would be overwritten."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from snakeddp.compat.lightning import LastCheckpointHooks

    theirs = set(dir(ModelCheckpoint)) | set(vars(ModelCheckpoint(dirpath=tmp_path, save_last=True)))
    ours = {name for name in vars(LastCheckpointHooks) if not name.startswith("_")}
    assert ours == {"on_last_saved", "write_last", "saves_on_train_epoch_end"} and not ours & theirs
