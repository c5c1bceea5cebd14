"""The profiles as users type them: bare names from the checkout's root after tools/setup.sh, a
user's own profile of the same name left alone, and plain `snakemake` with the workflow profile."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from snakeddp.platforms.table import TABLE
from tests.checkout import copy_of_this_checkout
from tests.helpers import REPO, TINY, subprocess_env, tmpfs

# Every profile: the azureml, spark and databricks ones with their SDKs.
pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv]
# The platforms shipped with snakeddp, from the registry's table: a new row gets its profile checked here.
NAMES = tuple(row.name for row in TABLE)
# What a bare dry run of the default config stops on where a platform needs more than the checkout has, each
# line proving the profile was found and read; the others plan the pipeline.
REFUSALS = {
    "azureml": "the azureml profile needs an azureml: section",  # the default config has no azureml: section
    "spark": "the spark profile found no Spark master",  # this home: no spark-defaults.conf, no $MASTER
    "databricks": "databricks.stage is not set",  # the default config names no databricks.stage
    "slurm": "the slurm profile does not say what its nodes have",  # auto cannot mean the nodes' GPUs yet
}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of this checkout's files (tracked and new, nothing ignored), as a fresh clone has them."""
    return copy_of_this_checkout(tmp_path / "snakeddp")


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    """A private home and config directory; a venv the set-up finds already matching the lock, so
    tools/setup.sh installs nothing and this interpreter's snakemake is the one on PATH: this venv's
    python and packages, seen through links (set-up only reads them when nothing differs)."""
    home = tmp_path / "home"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "python3.11").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    (venv / "bin" / "python").symlink_to(Path(sys.prefix) / "bin" / "python")
    (venv / "lib" / "python3.11" / "site-packages").symlink_to(
        Path(sys.prefix) / "lib" / "python3.11" / "site-packages"
    )
    # tools/setup.sh's stamp: the lock, the torch builds' locks and pyproject.toml it was made from.
    builds = b"".join(path.read_bytes() for path in sorted((REPO / "envs").glob("requirements-torch-*.lock")))
    lock = (REPO / "envs" / "requirements.lock").read_bytes() + builds + (REPO / "pyproject.toml").read_bytes()
    (venv / ".snakeddp-locks").write_text(hashlib.sha256(lock).hexdigest() + "\n")
    # Were the packages not the locks', set-up would repair them through the link: refuse instead.
    drift = [venv / "bin" / "python", "-m", "snakeddp.environment.lock", "drift", REPO / "envs" / "requirements.lock"]
    drift += ["--optional", REPO / "envs" / "requirements-dev.lock"]
    differs = subprocess.run(drift, capture_output=True, text=True, env=subprocess_env())
    assert differs.returncode == 0, f"{differs.stdout}{differs.stderr} HINT: rerun tools/setup.sh --dev"
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    return subprocess_env(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), VENV=str(venv), PATH=path)


def listed(names: tuple[str, ...]) -> str:
    """'a, b and c', as tools/profiles.sh lists names."""
    names = sorted(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def typed(command: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(shlex.split(command), cwd=root, env=env, capture_output=True, text=True, timeout=300)


def hints(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "HINT:" in line]


def test_bare_profile_names_work_after_setup(checkout, user_env):
    assert set(REFUSALS) < set(NAMES), "a refusal for a platform the registry does not have"
    setup = typed("tools/setup.sh", checkout, user_env)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    config = Path(user_env["XDG_CONFIG_HOME"])
    linked = [line for line in setup.stdout.splitlines() if "now mean" in line]
    assert linked == [
        f"setup: --profile {listed(NAMES)} now mean {checkout}/profiles/NAME (linked from {config}/snakemake)"
    ]
    for name in NAMES:
        plan = typed(f"snakemake --profile {name} --dry-run", checkout, user_env)
        output = plan.stdout + plan.stderr
        assert f"Using profiles {name} and workflow specific profile profiles/default" in output
        # A profile's own `config: platform=...` is not announced as a command-line config.
        assert "additional config" not in output
        if name in REFUSALS:
            assert plan.returncode == 1 and REFUSALS[name] in output, output
            continue
        assert plan.returncode == 0, output
        assert "train" in output and "report" in output
    again = typed("tools/setup.sh", checkout, user_env)
    assert again.returncode == 0 and "profile" not in again.stdout + again.stderr


def test_a_users_own_profile_is_kept(checkout, user_env):
    own = Path(user_env["XDG_CONFIG_HOME"]) / "snakemake" / "slurm"
    own.mkdir(parents=True)
    (own / "config.yaml").write_text("executor: slurm\njobs: 7\n")
    setup = typed("tools/setup.sh", checkout, user_env)
    assert setup.returncode == 0 and not hints(setup), setup.stdout + setup.stderr
    # Said by a set-up that installs something (which runs tools/profiles.sh), not by every set-up.
    notes = hints(typed("tools/profiles.sh", checkout, user_env))
    assert len(notes) == 1 and f"{own} (yours, kept)" in notes[0] and "--profile profiles/slurm" in notes[0]
    assert not own.is_symlink() and (own / "config.yaml").read_text() == "executor: slurm\njobs: 7\n"
    assert (own.parent / "local").resolve() == checkout / "profiles" / "local"
    # What the hint says to type reaches this checkout's profile.
    plan = typed("snakemake --profile profiles/slurm --dry-run --config 'site={accelerator: cpu}'", checkout, user_env)
    assert plan.returncode == 0 and "Using profiles profiles/slurm and" in plan.stderr, plan.stdout + plan.stderr


def test_links_left_by_a_removed_checkout_are_replaced(checkout, user_env, tmp_path):
    # The set-up of a checkout that was since removed (or moved) left its links behind, reaching nothing.
    gone = tmp_path / "removed" / "snakeddp"
    links = Path(user_env["XDG_CONFIG_HOME"]) / "snakemake"
    links.mkdir(parents=True)
    for name in NAMES:
        (links / name).symlink_to(gone / "profiles" / name)
    setup = typed("tools/setup.sh", checkout, user_env)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert not hints(setup), setup.stdout
    for name in NAMES:
        assert (links / name).resolve() == checkout / "profiles" / name
    assert f"; {listed(NAMES)} pointed to {gone}/profiles/NAME (gone))" in setup.stdout
    plan = typed("snakemake --profile local --dry-run", checkout, user_env)
    assert plan.returncode == 0 and "Using profiles local and" in plan.stderr, plan.stdout + plan.stderr


def test_another_checkouts_links_are_said_in_one_line_once_and_the_hint_switches_them(checkout, user_env, tmp_path):
    """A second checkout's every set-up said five lines of about 300 characters (one a profile), even with nothing to
    do, and make setup-dev twice: a set-up with nothing to install says nothing of them, one that installs (it runs
    tools/profiles.sh) says one line, whose HINT makes every bare name this checkout's."""
    other = copy_of_this_checkout(tmp_path / "other")
    assert typed("tools/setup.sh", other, user_env).returncode == 0
    setup = typed("tools/setup.sh", checkout, user_env)
    assert setup.returncode == 0 and setup.stdout + setup.stderr == "", setup.stdout + setup.stderr
    said = typed("tools/profiles.sh", checkout, user_env)
    assert said.returncode == 0 and said.stderr == "" and hints(said) == said.stdout.splitlines()
    assert hints(said) == [
        f"setup: --profile {listed(NAMES)} mean another checkout's ({other}), kept. HINT: type --profile "
        "profiles/local for this checkout's, or run tools/profiles.sh --here to make the bare names mean this "
        "checkout's"
    ]
    # The hint's command, as printed, makes the bare names mean this checkout.
    command = hints(said)[0].split("or run ", 1)[1].removesuffix(" to make the bare names mean this checkout's")
    here = typed(command, checkout, user_env)
    assert here.returncode == 0 and f"pointed to {other}/profiles/NAME)" in here.stdout, here.stdout + here.stderr
    for name in NAMES:
        assert (Path(user_env["XDG_CONFIG_HOME"]) / "snakemake" / name).resolve() == checkout / "profiles" / name
    plan = typed("snakemake --profile local --dry-run", checkout, user_env)
    assert plan.returncode == 0 and "Using profiles local and" in plan.stderr, plan.stdout + plan.stderr
    assert typed("tools/profiles.sh", checkout, user_env).stdout == ""


@pytest.fixture
def read_only_config(tmp_path: Path) -> Iterator[Path]:
    """An empty read-only file system (a real mount) as XDG_CONFIG_HOME."""
    with tmpfs(tmp_path / "read-only-config", "ro,size=1m") as config:
        yield config


def test_a_read_only_config_directory_is_said_in_one_line_and_the_set_up_goes_on(checkout, user_env, read_only_config):
    """tools/profiles.sh ran mkdir under set -e: the set-up stopped at a raw mkdir error."""
    setup = typed("tools/setup.sh", checkout, {**user_env, "XDG_CONFIG_HOME": str(read_only_config)})
    assert setup.returncode == 0 and setup.stdout == "", setup.stdout + setup.stderr
    assert hints(setup) == setup.stderr.splitlines()
    assert hints(setup) == [
        f"setup: could not link the profiles into {read_only_config}/snakemake (Read-only file system), so bare "
        "names such as --profile local do not reach this checkout's; the set-up goes on. HINT: type --profile "
        "profiles/local (the path, from the checkout's root), or set XDG_CONFIG_HOME to a directory you can write "
        "and run tools/setup.sh again"
    ]
    # As the HINT says: the path reaches the profile; a config directory that can be written gets the links.
    plan = typed("snakemake --profile profiles/local --dry-run", checkout, user_env)
    assert plan.returncode == 0 and "Using profiles profiles/local and" in plan.stderr, plan.stdout + plan.stderr
    again = typed("tools/setup.sh", checkout, user_env)
    assert again.returncode == 0 and f"now mean {checkout}/profiles/NAME" in again.stdout, again.stdout + again.stderr


def test_plain_snakemake_uses_the_workflow_profile(checkout, user_env):
    plan = typed("snakemake --cores 2 --dry-run", checkout, user_env)
    output = plan.stdout + plan.stderr
    assert plan.returncode == 0, output
    assert "Using workflow specific profile profiles/default" in output and "train" in output


def test_a_bare_profile_typed_in_a_subdirectory_names_the_checkouts_root_and_the_same_command_there_plans(
    checkout, user_env
):
    """`cd config && snakemake --profile NAME`: Snakemake finds no Snakefile and reads no workflow profile there, so
    each profile selects snakeddp's terminal itself, which says in one line where to cd; doing so plans the runs."""
    assert typed("tools/setup.sh", checkout, user_env).returncode == 0
    for name in NAMES:
        refused = typed(f"snakemake --profile {name} --dry-run", checkout / "config", user_env)
        output = refused.stdout + refused.stderr
        assert refused.returncode == 1 and "No Snakefile found" not in output, output
        assert hints(refused) == [
            f"snakeddp: no Snakefile in {checkout}/config, a subdirectory of the checkout {checkout}, which snakemake "
            f"runs from. HINT: cd {checkout} and run the same command there (config/, profiles/ and results/ are "
            "relative to it)."
        ], output
    to = hints(refused)[0].split("HINT: cd ", 1)[1].split(" and run", 1)[0]
    plan = typed("snakemake --profile local --dry-run", Path(to), user_env)
    assert plan.returncode == 0 and "train" in plan.stdout + plan.stderr, plan.stdout + plan.stderr


def test_a_typed_config_keeps_each_profiles_platform(checkout, user_env):
    """`--config` and `--configfile` typed with a bare profile name keep the profile's platform; a
    platform typed against it is refused in one line, and what the line says to type works."""
    assert typed("tools/setup.sh", checkout, user_env).returncode == 0
    mine = {**TINY, "sweep": {"launch.devices": [1]}, "azureml": {"compute": "gpu-cluster", "submit": False}}
    (checkout / "mine.yaml").write_text(yaml.safe_dump(mine))

    # Before, any typed --config dropped the profile's platform: this trained here and exited 0.
    done = typed("snakemake --profile azureml --configfile mine.yaml --config 'model={lr: 0.01}'", checkout, user_env)
    run = checkout / "results" / "runs" / "devices-1"
    assert done.returncode != 0 and not (run / "provenance.json").exists(), done.stdout + done.stderr
    assert (run / "azureml" / "job.yml").is_file()
    assert "azureml.submit is false, so nothing was submitted" in (checkout / "logs/train/devices-1.log").read_text()

    # slurm: the profile's platform stays, so auto needs what the profile declares (here: typed too).
    (checkout / "lr.yaml").write_text("model: {lr: 0.01}\n")
    for given in ("--config 'model={lr: 0.01}'", "--configfile lr.yaml", "--configfile lr.yaml --config seed=3"):
        plan = typed(f"snakemake --profile slurm -n {given}", checkout, user_env)
        assert plan.returncode == 1 and len(hints(plan)) == 1, plan.stdout + plan.stderr
        assert "the slurm profile does not say what its nodes have (site.accelerator)" in hints(plan)[0]
    # A secret typed in --config: Snakemake's banner repeated the command line (its Command:), in the terminal
    # and its log, under every profile but local and spark.
    secret = "'tracking={mlflow: {tracking_uri: \"http://u:TypedSecret42@h\"}}'"
    declared = typed(
        f"snakemake --profile slurm -n --config 'model={{lr: 0.01}}' 'site={{accelerator: cpu}}' {secret}",
        checkout,
        user_env,
    )
    assert declared.returncode == 0, declared.stdout + declared.stderr
    assert "TypedSecret42" not in declared.stdout + declared.stderr
    for profile in ("databricks", "azureml"):
        command = f"snakemake --profile {profile} -n --configfile mine.yaml --config {secret}"
        planned = typed(command, checkout, user_env)
        assert "TypedSecret42" not in planned.stdout + planned.stderr, planned.stdout + planned.stderr
    assert not [log for log in (checkout / ".snakemake" / "log").iterdir() if "TypedSecret42" in log.read_text()]

    for command, theirs, profile in (
        ("snakemake --profile slurm -n --config platform=local", "local", "slurm"),
        ("snakemake --profile local -n --configfile mine.yaml --config platform=azureml", "azureml", "local"),
    ):
        refused = typed(command, checkout, user_env)
        assert refused.returncode == 1 and len(hints(refused)) == 1, refused.stdout + refused.stderr
        assert f"platform: {theirs} was given on the command line" in hints(refused)[0]
        assert f"--profile {profile} runs on platform {profile}" in hints(refused)[0]
        assert f"or run with --profile {theirs}." in hints(refused)[0]
    # As the HINT says: the platform typed with its own profile (or left out) plans the runs.
    assert typed("snakemake --profile local -n --config platform=local", checkout, user_env).returncode == 0


def test_the_databricks_profile_needs_credentials_and_runs_with_them(checkout, user_env, tmp_path):
    """Typed with the bare name in a fresh home: no credentials is one line with a HINT before any job;
    with DATABRICKS_HOST/DATABRICKS_TOKEN exported as the HINT says (at the local stub of the Jobs and
    Files APIs, which runs the task as the cluster's driver would), the workflow runs end to end."""
    from tests.databricks.test_submit import CONFIG, TOKEN, cluster_env, driver
    from tests.databricks_server import DatabricksStub

    assert typed("tools/setup.sh", checkout, user_env).returncode == 0
    # test_submit's run, but on TINY's data for one epoch: its larger data and 6 epochs time a driver lost
    # mid-training there; here the run need only run end to end (66 -> 37 s of wall, its CPU about the same).
    mine = {**CONFIG, "data": TINY["data"], "trainer": {**TINY["trainer"], "max_epochs": 1}}
    (checkout / "mine.yaml").write_text(yaml.safe_dump(mine))
    refused = typed("snakemake --profile databricks --configfile mine.yaml", checkout, user_env)
    assert refused.returncode == 1 and len(hints(refused)) == 1, refused.stdout + refused.stderr
    assert "no usable Databricks credentials" in hints(refused)[0] and "export DATABRICKS_HOST=" in hints(refused)[0]
    assert not (checkout / "results" / "runs").exists()
    stub = DatabricksStub(tmp_path / "workspace", TOKEN, driver(cluster_env()))
    try:
        env = {**user_env, "DATABRICKS_HOST": stub.url, "DATABRICKS_TOKEN": TOKEN}
        done = typed("snakemake --profile databricks --configfile mine.yaml", checkout, env)
    finally:
        stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert (checkout / "results" / "runs" / "devices-2" / "provenance.json").is_file()
    assert (checkout / "results" / "report" / "report.html").is_file()
    assert TOKEN not in done.stdout + done.stderr
