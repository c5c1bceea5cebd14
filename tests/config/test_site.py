"""snakeddp.config.site: launch.accelerator: auto against what a cluster profile declares, and the
requests a run's layout makes of the nodes."""

from __future__ import annotations

import pytest

from snakeddp import config
from snakeddp.config import site
from snakeddp.util import gpus
from tests.gpu_standin import StandIn

DECLARED_NOTHING = config.validate({})["site"]


def launch(**overrides):
    return config.validate({"launch": overrides})["launch"]


@pytest.mark.parametrize("platform", ["slurm", "azureml"])
def test_auto_on_a_cluster_is_what_its_profile_declares(platform):
    assert site.accelerator("auto", platform, {"accelerator": "gpu"}) == "gpu"
    assert site.accelerator("auto", platform, {"accelerator": "cpu"}) == "cpu"
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


def test_auto_on_the_local_platform_is_gpu_where_this_machine_shows_a_gpu_per_rank(monkeypatch, tmp_path):
    one = StandIn(tmp_path / "one", count=1)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidia0").touch()
    # This machine as its /proc and /dev show it (NVML, which a GPU host would answer from, left unasked).
    monkeypatch.setattr(gpus, "_nvml", lambda: None)
    monkeypatch.setattr(gpus, "DRIVER", one.root / "driver" / "nvidia")
    monkeypatch.setattr(gpus, "DEVICES", tmp_path / "dev")
    assert site.resolved(launch(devices=1), "local", DECLARED_NOTHING, env={}) == "gpu"
    assert site.resolved(launch(devices=2), "local", DECLARED_NOTHING, env={}) == "cpu", "a rank without a GPU"
    assert site.resolved(launch(devices=1), "local", DECLARED_NOTHING, env={"CUDA_VISIBLE_DEVICES": ""}) == "cpu"
    assert site.resolved(launch(devices=2, accelerator="gpu"), "local", DECLARED_NOTHING, env={}) == "gpu", (
        "asked for: preflight compares it with the GPUs"
    )
    monkeypatch.setattr(gpus, "DRIVER", tmp_path / "no-driver")
    assert site.resolved(launch(devices=1), "local", DECLARED_NOTHING, env={}) == "cpu"


def test_memory_is_sized_per_gpu_rank_unless_the_run_says():
    gpus = {"mem_mb_per_gpu": 24000, "cpus_per_gpu": 6}
    assert site.mem_mb(launch(devices=4), "gpu", gpus) == 96000
    assert site.mem_mb(launch(devices=4), "cpu", gpus) == site.CPU_MEM_MB_PER_NODE
    assert site.mem_mb(launch(devices=4, mem_mb=5000), "gpu", gpus) == 5000
    assert site.mem_mb(launch(devices=2), "gpu", DECLARED_NOTHING) == 2 * 16000, "the schema's default"


def test_a_gpu_rank_gets_the_sites_cores_at_least():
    gpus = {"cpus_per_gpu": 6}
    assert site.cpus_per_process(launch(threads_per_process=1), "gpu", gpus) == 6
    assert site.cpus_per_process(launch(threads_per_process=8), "gpu", gpus) == 8
    assert site.cpus_per_process(launch(threads_per_process=1), "cpu", gpus) == 1
