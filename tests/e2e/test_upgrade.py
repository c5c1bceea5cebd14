"""A pipeline finished by an earlier version of snakeddp is up to date for this one.

The rules' command text and parameters are Snakemake's rerun key: a change to them (or to the
dataset ids, run ids or partition bytes behind them) would retrain every user's runs after an
upgrade. This runs the tiny pipeline from a checkout of ``BEFORE`` (the last commit before the
package's architecture changed), puts this checkout's files in its place (same path, as an
upgrade in place does) and runs snakemake again.

Both runs name the same lock file (``environment.lock``): what is compared is the code, in one
environment. A change of the lock itself is an environment change, which retrains by design
(docs/environments.md).

The files keep their modification times, which are older than the outputs. The report's RO-Crate
lists the workflow's own files as inputs, so an upgrade that adds or touches one rewrites the report
whatever else changed: that rerun is by design, and the only job this test allows.
"""

import shutil
import subprocess

import pytest

from tests.helpers import REPO, TINY, Workflow, subprocess_env

pytestmark = pytest.mark.e2e

BEFORE = "febc63a"


def this_checkout() -> list[str]:
    """Tracked and new (not ignored) files of this checkout, as it is now."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [name for name in listed.stdout.split("\0") if name and (REPO / name).is_file()]


def test_a_pipeline_finished_before_the_change_has_nothing_to_do_after_it(tmp_path):
    checkout = tmp_path / "checkout"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE], capture_output=True, check=True)
    checkout.mkdir()
    # tar(1), not tarfile: extractall's filter= (safe extraction) needs Python 3.11.4, and Debian 12's is 3.11.2.
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive.stdout, check=True)
    work = tmp_path / "work"
    work.mkdir()
    flow = Workflow(work, checkout=checkout)
    lock = tmp_path / "requirements.lock"
    shutil.copy2(REPO / "envs" / "requirements.lock", lock)
    flow.write_config({**TINY, "environment": {"lock": str(lock)}})
    env = subprocess_env(PYTHONPATH=str(checkout / "src"))
    flow.run(env=env)
    assert (work / "results" / "report" / "ro-crate-metadata.json").is_file()

    shutil.rmtree(checkout)
    for name in this_checkout():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, checkout / name)
    # Nothing is regenerated or retrained: the report alone is rebuilt, because its crate lists the workflow's
    # files (this version adds rules/checkout.smk) and records the config in a canonical form.
    planned = flow.planned_jobs(env=env)
    assert set(planned) <= {"report", "all"}, planned
    flow.run(env=env)
    done = flow.run(env=env)
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout + done.stderr
