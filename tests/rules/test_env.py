"""rules/env.smk and the workflow's environment directives, through the real Snakemake CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checkout import LINKED
from tests.environment.hashed import hashed_envs, unhashed
from tests.helpers import REPO, TINY, Workflow, subprocess_env

# lightning 2.6.5 as a YAML's pip line names it, with its files' real sha256 (GHSA-qqmf-gpg7-g8gw denies it).
DENIED_LIGHTNING = (
    "lightning==2.6.5 --hash=sha256:16a30310ed69afde3748491feb5d13508908effd70390d2bfc203dc0812a4b4a "
    "--hash=sha256:3702fb7ef4ab51a8c3d4a140f4674514fe72973a9673dfa05e07a078e2767389"
)

MISSING_SOFTWARE = "Specify a conda environment or container for each rule."


def test_lint_reports_no_rule_without_its_environment(workflow):
    workflow.write_config(TINY)
    done = workflow.run("--lint", check=False)
    output = done.stdout + done.stderr
    assert "Lints for rule" in output or "Congratulations" in output, output[-2000:]
    assert MISSING_SOFTWARE not in output and "environment modules are not enough" not in output


def test_lint_does_name_a_rule_without_an_environment(tmp_path):
    """The lint the test above looks for is the one Snakemake prints for such a rule."""
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text('rule bare:\n    output:\n        "x.txt",\n    shell:\n        "true"\n')
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(tmp_path), "--lint"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        check=False,
    )
    assert MISSING_SOFTWARE in done.stdout + done.stderr


def test_apptainer_without_an_image_is_a_clear_error(workflow):
    workflow.write_config(TINY)
    done = workflow.run("--dry-run", "--sdm", "apptainer", check=False)
    assert done.returncode != 0
    assert "--sdm apptainer needs an image, and environment.image is null. HINT:" in done.stdout + done.stderr


def checkout_with_envs(root: Path) -> Path:
    """A checkout of this one's workflow files (linked) whose envs/ is a copy with every torch build's lock hashed
    (tests.environment.hashed), for a test to edit: the rules' conda envs are made from its YAMLs."""
    root.mkdir()
    for name in LINKED:
        if name != "envs":
            (root / name).symlink_to(REPO / name)
    hashed_envs(root / "envs")
    return root


@pytest.mark.parametrize("hashed", [True, False], ids=["hashed", "unhashed"])
def test_conda_envs_of_a_torch_build_are_refused_before_any_job_unless_its_lock_has_hashes(tmp_path, hashed):
    """--sdm conda with environment.cuda "12.6": where its lock holds hashes the workflow's checks pass, and Snakemake
    goes on to its own conda set-up (which refuses to go on on a machine without conda, made so here); where it
    holds none (PyTorch's index did not answer tools/lock.sh, as on this machine) one line says so, not pip failing
    inside the first conda env."""
    checkout = checkout_with_envs(tmp_path / "checkout")
    if not hashed:
        unhashed(checkout / "envs", "12.6")
    workflow = Workflow(tmp_path / "work", checkout=checkout)
    workflow.directory.mkdir()
    workflow.write_config({**TINY, "environment": {"cuda": "12.6"}})
    env = subprocess_env(PATH=path_without(tmp_path / "no-conda", "conda", "mamba", "micromamba"))
    done = workflow.run("--dry-run", "--sdm", "conda", check=False, env=env)
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if "HINT:" in line]
    if hashed:
        assert lines == [] and "Building DAG of jobs" in output, output[-3000:]
        assert "Error running conda info. Is conda installed and accessible?" in output, output[-3000:]
        return
    assert done.returncode != 0 and len(lines) == 1, output
    assert 'environment.cuda "12.6": ' in lines[0] and "has no hashes" in lines[0]
    assert "HINT: run tools/lock.sh on a machine that reaches https://download.pytorch.org/whl/cu126" in lines[0]


def test_conda_envs_that_would_install_a_denied_release_are_refused_before_any_job(tmp_path):
    """A lock edited by hand or by a merge to lightning 2.6.5 (its real hashes), the stage YAMLs written from it:
    `snakemake --sdm conda` stops in one line naming the advisory and the YAML, before conda makes any env."""
    checkout = checkout_with_envs(tmp_path / "checkout")
    train = checkout / "envs" / "train.yaml"
    pinned = train.read_text()
    train.write_text(re.sub(r"- lightning==2\.6\.6 [^\n]*", "- " + DENIED_LIGHTNING, pinned))
    assert train.read_text() != pinned, "train.yaml pins lightning 2.6.6"
    workflow = Workflow(tmp_path / "work", checkout=checkout)
    workflow.directory.mkdir()
    workflow.write_config(TINY)
    done = workflow.run("--dry-run", "--sdm", "conda", check=False)
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if "HINT:" in line]
    assert done.returncode != 0 and lines == [
        f"{train}: lightning 2.6.5 is denied by envs/denied.toml (GHSA-qqmf-gpg7-g8gw (CVE-2026-58659): code "
        "execution in load_from_checkpoint, fixed in 2.6.6); the first good version is 2.6.6. HINT: tools/add.sh "
        "lightning==2.6.6"
    ], output
    assert not (workflow.directory / ".snakemake" / "conda").exists()


def path_without(directory: Path, *commands: str) -> str:
    """A PATH of one directory linking every command of this one but ``commands``: a machine without them."""
    directory.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for command in Path(folder).glob("*") if Path(folder).is_dir() else ():
            link = directory / command.name
            if command.name not in commands and not link.exists() and os.access(command, os.X_OK):
                link.symlink_to(command.resolve())
    return str(directory)


def test_with_an_image_the_rules_go_to_apptainer(workflow, tmp_path):
    """With environment.image set, --sdm apptainer gets past the workflow to Snakemake's own
    container set-up, which refuses to go on on a machine without apptainer (made so on one that has it)."""
    workflow.write_config({**TINY, "environment": {"image": "docker://ghcr.io/org/snakeddp:0.1.0-torch2.13.0"}})
    env = subprocess_env(PATH=path_without(tmp_path / "no-apptainer", "apptainer", "singularity"))
    done = workflow.run("--dry-run", "--sdm", "apptainer", check=False, env=env)
    output = done.stdout + done.stderr
    assert "environment.image is null" not in output
    assert "apptainer or singularity command has to be available" in output, output[-3000:]


@pytest.mark.parametrize(("cuda", "train_env"), [("13.0", "envs/train.yaml"), ("12.6", "envs/train-cu126.yaml")])
def test_the_train_stage_runs_in_the_conda_env_of_the_chosen_torch_build(workflow, cuda, train_env):
    """Snakemake's --containerize hashes every rule's conda env file before it needs conda itself,
    so its log names the envs the rules resolved to (the train rules' and env_capture's of train)."""
    workflow.write_config({**TINY, "environment": {"cuda": cuda}})
    done = workflow.run("--containerize", check=False)
    said = (done.stdout + done.stderr).splitlines()
    # Paths are relative to the working directory; what matters is which file under envs/.
    hashed = {"envs/" + line.rstrip(".").rpartition("/envs/")[2] for line in said if "Hashing conda" in line}
    assert hashed == {"envs/data.yaml", train_env, "envs/report.yaml"}, "\n".join(said)


def test_slurm_training_inside_the_image_is_refused_before_anything_is_submitted(tmp_path):
    """The image has no Slurm client: srun (or mpirun's daemons) would fail in the job with `srun: not found`."""
    workflow = Workflow(tmp_path, profile="slurm")
    workflow.write_config({**TINY, "environment": {"image": "docker://ghcr.io/org/snakeddp:0.1.0-torch2.13.0"}})
    done = workflow.run("--dry-run", "--sdm", "apptainer", check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert output.count("run base: --sdm apptainer runs the train rule inside the image") == 1, output[-3000:]
    assert output.count("HINT: train on Slurm from the checkout's .venv") == 1


def test_build_image_without_an_engine_says_so(workflow, tmp_path):
    workflow.write_config(TINY)
    env = subprocess_env(DOCKER_HOST=f"unix://{tmp_path}/no-daemon.sock")
    done = workflow.run("build_image", check=False, env=env)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "No container engine can build the image here" in output
    assert "docker: installed, but `docker info` fails" in output and "podman: not installed" in output
    assert not (workflow.directory / "results" / "envs" / "image.json").exists()


@pytest.mark.e2e
def test_a_lock_change_retrains_and_lands_in_provenance(tmp_path):
    """Edit one pinned version in a copy of the lock: the next dry run plans the environment
    captures, training and the report (never the data), and the rerun's provenance carries the
    new environment hash."""
    workflow = Workflow(tmp_path)
    lock = tmp_path / "requirements.lock"
    lock.write_text((REPO / "envs" / "requirements.lock").read_text())
    config = {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1}, "environment": {"lock": str(lock)}}
    workflow.write_config(config)
    workflow.run()
    record = tmp_path / "results" / "envs" / "train.json"
    provenance = tmp_path / "results" / "runs" / "base" / "provenance.json"
    first = json.loads(record.read_text())["hash"]
    assert json.loads(provenance.read_text())["environment"]["environment_hash"] == first
    assert workflow.planned_jobs() == {}

    pinned = lock.read_text()
    lock.write_text(pinned.replace("\nlightning==2.6.6 \\\n", "\nlightning==2.6.7 \\\n"))
    assert lock.read_text() != pinned, "the lock pins lightning 2.6.6 (a hashed line)"
    assert workflow.planned_jobs() == {"env_capture": 3, "train": 1, "report": 1, "all": 1}

    target = str(provenance.relative_to(tmp_path))  # the run (the report's rerun is planned above)
    workflow.run(target)
    second = json.loads(record.read_text())["hash"]
    assert second != first
    assert json.loads(provenance.read_text())["environment"]["environment_hash"] == second
    assert workflow.planned_jobs(target) == {}
