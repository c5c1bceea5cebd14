"""docs/slurm.md's "Try it on this machine", typed as the page writes it, on the real test cluster.

The page's `snakemake` lines run in the root of a checkout of this workflow with the default
config (config/config.yaml: launch.accelerator auto, a sweep of devices 1 and 2) and the bare
profile name that tools/setup.sh makes work; the cluster (tests/slurm/cluster.py) is the one
`tests/slurm/cluster.sh start` makes, its environment what `cluster.sh env` prints. The only thing
added to what the page types is faster status polling (FAST_POLLING's options, FAST_STATUS's variable).
Nothing declares what the nodes have: Slurm says it. The first line is refused before anything is
submitted (no node of the GPU partition has a rank's default 4 CPUs and 16000 MB); the second, what that
refusal's HINT says with rounder numbers, submits GPU jobs that Slurm takes and whose ranks stop on the
page's line.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from snakeddp.util import gpus
from tests.checkout import LINKED
from tests.helpers import REPO, subprocess_env
from tests.slurm.cluster import NODES, PARTITION, Cluster
from tests.slurm.workflow import FAST_POLLING, FAST_STATUS, run_uuid

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

PAGE = REPO / "docs" / "slurm.md"
NO_CUDA = "torch sees no CUDA device on "


def walkthrough() -> list[str]:
    """The `.venv/bin/snakemake` lines of the page's "Try it on this machine" commands, comments cut off."""
    section = PAGE.read_text().split("**Try it on this machine**", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [line.split(" #")[0].strip() for line in block.splitlines() if line.startswith(".venv/bin/snakemake")]


class Typed:
    """A checkout's root where a user types the page's commands."""

    def __init__(self, root: Path, cluster: Cluster) -> None:
        self.root, self.cluster = root, cluster
        root.mkdir()
        for name in (*LINKED, "config", ".venv"):
            (root / name).symlink_to(REPO / name)
        # tools/setup.sh's link: `--profile slurm` means this checkout's profiles/slurm.
        profiles = root.parent / "config-home" / "snakemake"
        profiles.mkdir(parents=True)
        (profiles / "slurm").symlink_to(root / "profiles" / "slurm")
        self.env = subprocess_env(XDG_CONFIG_HOME=str(profiles.parent), **FAST_STATUS, **cluster.env())
        self.gpu_logs: dict[str, str] = {}

    def type(self, line: str, *extra: str) -> subprocess.CompletedProcess:
        argv = [*shlex.split(line), *extra]
        return subprocess.run(
            argv, cwd=self.root, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900
        )

    def slurm(self, *argv: str) -> str:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: Cluster) -> tuple[Typed, list, list]:
    """The checkout, what each of the page's snakemake lines printed, in order, and two dry runs typed right
    after the first (before the third trains the sweep, after which a dry run has nothing left to plan): as
    the page types it, and with the --config its refusal's HINT gives."""
    commands = walkthrough()
    assert len(commands) == 3, commands
    checkout = Typed(tmp_path_factory.mktemp("walkthrough") / "snakeddp", slurm_cluster)
    refused = checkout.type(commands[0], *FAST_POLLING)
    plans = [checkout.type(".venv/bin/snakemake --profile slurm -n")]
    given = re.search(r'--config "(site=\{.*?\})"', "".join(hint_lines(refused)))
    if given:
        plans.append(checkout.type(".venv/bin/snakemake --profile slurm -n", "--config", given.group(1)))
    ran = checkout.type(commands[1], *FAST_POLLING)
    # The GPU runs' logs as the second line left them: the third trains the same runs and writes them anew.
    checkout.gpu_logs = {
        run: (checkout.root / "logs" / "train" / f"{run}.log").read_text() for run in ("devices-1", "devices-2")
    }
    return checkout, [refused, ran, checkout.type(commands[2], *FAST_POLLING)], plans


def hint_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if "HINT:" in line]


def test_the_first_line_is_refused_before_anything_is_submitted(typed):
    checkout, (refused, *_), _ = typed
    assert refused.returncode == 1, refused.stdout[-3000:]
    (line,) = hint_lines(refused)
    # As the page shows it, word for word: the test nodes declare fixed sizes (tests/slurm/cluster.py).
    shown = re.search(r"```text\n(run devices-1: .*?)\n```", PAGE.read_text(), flags=re.S).group(1)
    assert line == shown
    assert refused.stdout.count("HINT:") == 1
    uuid = run_uuid(refused.stdout)
    assert not checkout.slurm("sacct", "--allocations", "--noheader", f"--name={uuid}").strip(), "a job was submitted"


def test_a_dry_run_notes_the_refusal_and_what_the_hint_says_fits_every_run(typed):
    """`-n` plans the jobs and notes the line a real run stops on; with the HINT's own --config typed,
    it notes nothing."""
    _, (refused, *_), plans = typed
    assert len(plans) == 2, "the refusal's HINT gives a --config"
    plan, given = plans
    assert plan.returncode == 0 and "train" in plan.stdout, plan.stdout[-3000:]
    assert hint_lines(plan) == [f"Dry run; a real run would stop here: {hint_lines(refused)[0]}"]
    assert given.returncode == 0, given.stdout[-3000:]
    assert "HINT:" not in given.stdout and "train" in given.stdout


def test_the_second_line_runs_gpu_jobs_whose_ranks_stop_on_the_pages_line(typed):
    checkout, (_, ran, _), _ = typed
    assert ran.returncode != 0, "GPU runs cannot train on the test cluster's null devices"
    uuid = run_uuid(ran.stdout)
    fields = "--format=JobID,Comment%200"
    jobs = checkout.slurm("sacct", "--allocations", "--parsable2", "--noheader", fields, f"--name={uuid}")
    last = {comment: job for job, comment in (line.split("|") for line in jobs.splitlines())}
    for devices in (1, 2):
        run = f"devices-{devices}"
        # The ranks' refusal (a CPU build of torch) would meet every retry again: queued once, not retries: 2 more.
        comments = [line.split("|")[1] for line in jobs.splitlines()]
        assert comments.count(f"rule_train_wildcards_{run}") == 1, jobs
        # auto was gpu because Slurm says partition main's nodes have GPUs; scontrol shows what was asked.
        (job,) = [job for comment, job in last.items() if comment == f"rule_train_wildcards_{run}"]
        shown = checkout.slurm("scontrol", "--oneliner", "show", "job", job)
        assert f"Partition={PARTITION} " in shown and f"TresPerNode=gres:gpu:{devices} " in shown, shown
        assert f"MinCPUsNode={devices} " in shown and f"MinMemoryNode={devices * 2000}M " in shown, shown
        (line,) = [line for line in checkout.gpu_logs[run].splitlines() if NO_CUDA in line]
        # The nodes are this machine: the driver its ranks read is this host's (none where it has no GPU).
        driver = re.escape(gpus.driver_version() or "none loaded")
        assert re.search(rf"{NO_CUDA}({'|'.join(map(re.escape, NODES))}) \(NVIDIA driver: {driver}; ", line), line


def test_the_third_line_trains_the_sweep_on_the_cpus_and_writes_the_report(typed):
    checkout, (*_, trained), _ = typed
    assert trained.returncode == 0, trained.stdout[-3000:]
    for run in ("devices-1", "devices-2"):
        record = (checkout.root / "results" / "runs" / run / "provenance.json").read_text()
        assert '"accelerator": "cpu"' in record, run
    report = checkout.root / "results" / "report" / "report.html"
    assert report.is_file() and f"Report: {report.resolve()}" in trained.stdout


def test_an_account_the_user_has_not_is_one_line_before_any_job_and_its_hint_runs(typed):
    """The profile's placeholder account (slurm_account=my_project) cost a traceback per job and try (the plugin's
    own check): it is one line before any job, naming the accounts sacctmgr lists; one of them, as the HINT says,
    runs. Typed as the page's third line, which trained the sweep: its report made again."""
    checkout, *_ = typed
    third = walkthrough()[2]
    account = ("--set-resources", "train:slurm_account='my_project'")
    planned = checkout.type(third, "-n", "--forcerun", "report", *account)
    (noted,) = [line for line in hint_lines(planned) if "slurm_account" in line] or [planned.stdout[-3000:]]
    assert planned.returncode == 0 and noted.startswith(
        "Dry run; a real run would stop here: slurm_account 'my_project' (set-resources: train in the profile"
    ), noted
    before = checkout.slurm("sacct", "--allocations", "--noheader", "--parsable2", "--format=JobID")
    refused = checkout.type(third, "--forcerun", "report", *FAST_POLLING, *account)
    (line,) = hint_lines(refused)
    assert refused.returncode == 1 and "Traceback" not in refused.stdout and line == noted.split("stop here: ")[1]
    assert checkout.slurm("sacct", "--allocations", "--noheader", "--parsable2", "--format=JobID") == before
    listed = re.search(r"sacctmgr lists: ([^)]*)\)", line).group(1).split(", ")
    hinted = ("--set-resources", f"train:slurm_account='{listed[0]}'")
    ran = checkout.type(third, "--forcerun", "report", *FAST_POLLING, *hinted)
    assert ran.returncode == 0 and "HINT:" not in ran.stdout, ran.stdout[-3000:]
