"""snakeddp.config.site: launch.accelerator: auto against what a cluster profile declares, and the
requests a run's layout makes of the nodes."""

from __future__ import annotations

import json

import pytest

from snakeddp import config
from snakeddp.config import parts, site
from tests.gpu_standin import StandIn
from tests.helpers import subprocess_env


def declared(**given) -> parts.Site:
    return parts.Site.of(config.validate({"site": given})["site"])


DECLARED_NOTHING = declared()


def launch(**overrides):
    return parts.Launch.of(config.validate({"launch": overrides})["launch"])


@pytest.mark.parametrize("platform", ["slurm", "azureml"])
def test_auto_on_a_cluster_is_what_its_profile_declares(platform):
    assert site.accelerator("auto", platform, declared(accelerator="gpu")) == "gpu"
    assert site.accelerator("auto", platform, declared(accelerator="cpu")) == "cpu"
    assert site.accelerator("cpu", platform, DECLARED_NOTHING) == "cpu", "an explicit request needs no declaration"


@pytest.mark.parametrize("platform", ["slurm", "azureml"])
def test_auto_on_a_cluster_that_declares_nothing_is_refused_in_one_line_naming_both_ways_out(platform):
    with pytest.raises(site.SiteError) as refused:
        site.accelerator("auto", platform, DECLARED_NOTHING, run_id="devices-2")
    message = str(refused.value)
    assert message.startswith("run devices-2: launch.accelerator is auto") and "\n" not in message
    assert f"the {platform} profile does not say what its nodes have" in message
    assert 'HINT: declare it in the profile\'s config: entries ("site={accelerator: gpu}"' in message
    assert "or set launch.accelerator: gpu (or cpu)" in message


# site.resolved for one run of each shape, in a process on a stand-in machine (as the workflow decides it there).
RESOLVED = """
import json
from snakeddp import config
from snakeddp.config import parts, site
declared = parts.Site.of(config.validate({})["site"])
def launch(**given):
    return parts.Launch.of(config.validate({"launch": given})["launch"])
print(json.dumps([
    site.resolved(launch(devices=1), "local", declared, env={}),
    site.resolved(launch(devices=2), "local", declared, env={}),
    site.resolved(launch(devices=1), "local", declared, env={"CUDA_VISIBLE_DEVICES": ""}),
    site.resolved(launch(devices=2, accelerator="gpu"), "local", declared, env={}),
]))
"""


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        # One GPU the CUDA build runs on: a rank each, else the CPU; gpu asked for stays gpu (preflight checks it).
        ({"count": 1}, ["gpu", "cpu", "cpu", "gpu"]),
        # The same GPU under a CPU build of torch, or a driver older than the build: no GPU to train on.
        ({"count": 1, "build": "cpu"}, ["cpu", "cpu", "cpu", "gpu"]),
        ({"count": 1, "driver": "570.86.15"}, ["cpu", "cpu", "cpu", "gpu"]),
        # A V100 the 13.0 build has no kernels for; the 12.6 build has.
        ({"count": 1, "capability": "7.0", "model": "Tesla V100-SXM2-16GB"}, ["cpu", "cpu", "cpu", "gpu"]),
        ({"count": 1, "capability": "7.0", "build": "12.6", "driver": "535.183.01"}, ["gpu", "cpu", "cpu", "gpu"]),
        # A container without the GPUs on a GPU host.
        ({"count": 2, "reachable": False}, ["cpu", "cpu", "cpu", "gpu"]),
    ],
)
def test_auto_on_the_local_platform_is_gpu_where_this_machine_shows_a_gpu_per_rank_torch_runs_on(
    standin_checks, tmp_path, machine, expected
):
    standin = StandIn(tmp_path / "machine", **machine)
    done = standin_checks.run(standin, standin.env(subprocess_env()), RESOLVED)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == expected


def test_memory_is_sized_per_gpu_rank_unless_the_run_says():
    gpus = declared(mem_mb_per_gpu=24000, cpus_per_gpu=6)
    assert site.mem_mb(launch(devices=4), "gpu", gpus) == 96000
    assert site.mem_mb(launch(devices=4), "cpu", gpus) == site.CPU_MEM_MB_PER_NODE
    assert site.mem_mb(launch(devices=4, mem_mb=5000), "gpu", gpus) == 5000
    assert site.mem_mb(launch(devices=2), "gpu", DECLARED_NOTHING) == 2 * 16000, "the schema's default"


def test_a_gpu_rank_gets_the_sites_cores_at_least():
    gpus = declared(cpus_per_gpu=6)
    assert site.cpus_per_process(launch(threads_per_process=1), "gpu", gpus) == 6
    assert site.cpus_per_process(launch(threads_per_process=8), "gpu", gpus) == 8
    assert site.cpus_per_process(launch(threads_per_process=1), "cpu", gpus) == 1
