"""The GPU matrix, for a machine with CUDA GPUs: `pytest -m gpu` (about ten minutes on 1-2 GPUs).

Deselected by default (pyproject.toml's addopts), so the CPU suite never runs it; selected on a GPU
host, every test fails loudly where no CUDA device is visible instead of passing vacuously. Each
run trains through `python -m snakeddp.launch` on the local platform, as the train rule does, on
`min(2, GPUs)` ranks: precision x strategy, preemption and an exact resume, determinism, the host
memory a rank holds, and NCCL's own initialisation lines.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp import config
from tests.helpers import subprocess_env
from tests.training_runs import SIGNALLED_RECORDS, Run, slow_config

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]


def gpus() -> int:
    """Ranks per run: up to two of this machine's GPUs; fails (not skips) where there is none."""
    import torch

    count = torch.cuda.device_count()
    assert count >= 1, "pytest -m gpu needs CUDA GPUs; run it on a GPU machine (docs/development.md)"
    return min(2, count)


def capability() -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(0)


def gpu_config(**trainer) -> dict:
    return {
        "data": {"num_train_files": 2, "num_records_per_train_file": 4096, "num_val_records": 512, "num_features": 64},
        "model": {"hidden_sizes": [256, 256]},
        "trainer": {"max_epochs": 2, "batch_size": 256, "early_stopping": {"enabled": False}, **trainer},
        "launch": {"devices": gpus(), "accelerator": "gpu", "threads_per_process": 2},
        "network": {"env": {"NCCL_DEBUG": "INFO"}},
    }


def trained(tmp_path: Path, cfg: dict) -> tuple[Run, dict]:
    run = Run(tmp_path, cfg)
    run.env = network_env(cfg)
    assert run.train() == 0, run.log.read_text()[-4000:]
    return run, json.loads((run.dir / "provenance.json").read_text())


def network_env(cfg: dict) -> dict[str, str]:
    """network.env reaches the ranks through the workflow's environment (jobenv); here, directly."""
    return {key: str(value) for key, value in cfg.get("network", {}).get("env", {}).items()}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed"])
def test_each_precision_and_strategy_trains_on_the_gpus(tmp_path, precision, strategy):
    cfg = gpu_config(precision=precision, strategy=strategy)
    if precision.startswith("bf16") and capability() < (8, 0):
        run = Run(tmp_path, cfg)
        assert run.train() != 0
        assert "has no native bfloat16" in run.log.read_text() and not (run.dir / "provenance.json").exists()
        return
    run, record = trained(tmp_path, cfg)
    assert (record["launch"]["accelerator"], record["launch"]["backend"]) == ("gpu", "nccl")
    assert record["launch"]["strategy"] == strategy and record["config"]["trainer"]["precision"] == precision
    assert record["training"]["epochs_completed"] == 2 and record["training"]["deterministic"] is False
    # It learns in every precision: the training loss falls from the first epoch to the second, and the
    # model classifies far better than a guess (ln 2 = 0.69). The validation loss is no measure of that
    # here: on an H200 it was already 0.216 after one epoch, and 0.230 after the second.
    rows = run.metrics()
    train, val = ([float(row[key]) for row in rows] for key in ("train_loss", "val_loss"))
    assert len(rows) == 2 and all(math.isfinite(loss) for loss in train + val), rows
    assert train[-1] < train[0] and val[-1] < 0.5 * math.log(2), rows
    environment = record["environment"]
    assert environment["cuda"] and environment["gpus"], environment


def test_preemption_saves_mid_epoch_on_gpus_and_the_rerun_resumes_exactly(tmp_path):
    """Deterministic mode, so the resumed run's losses equal an uninterrupted run's bit for bit."""
    cfg = slow_config(SIGNALLED_RECORDS, max_epochs=3, deterministic=True)
    cfg["launch"] = {"devices": gpus(), "accelerator": "gpu"}
    reference, _ = trained(tmp_path / "reference", cfg)

    run = Run(tmp_path / "signalled", cfg)
    process = run.start()
    run.wait_for_epochs(process, 1)
    process.send_signal(signal.SIGUSR1)
    assert process.wait(timeout=300) == 75, run.log.read_text()[-3000:]
    assert run.train() == 0, run.log.read_text()[-3000:]
    seen = [i for t in run.traces() for i in t["ids"]]
    assert len(seen) == 3 * SIGNALLED_RECORDS, "every sample of every epoch trained exactly once"
    assert [r["val_loss"] for r in run.metrics()] == [r["val_loss"] for r in reference.metrics()]


def test_two_deterministic_runs_give_identical_weights(tmp_path):
    import torch

    cfg = gpu_config(deterministic=True)
    weights = []
    for name in ("first", "second"):
        run, record = trained(tmp_path / name, cfg)
        assert record["training"]["deterministic"] is True
        state = torch.load(run.dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
        weights.append(state)
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key


def test_a_gpu_rank_holds_less_host_memory_than_the_default_request(tmp_path):
    """site.mem_mb_per_gpu (16000 MB by default) is what the workflow asks a scheduler for per GPU rank."""
    default = config.validate({})["site"]["mem_mb_per_gpu"]
    run = Run(tmp_path, gpu_config())
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *run.argv()], env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    peak_mb = int(done.stdout.split()[-1]) / 1024
    print(f"peak host memory of one GPU rank: {peak_mb:.0f} MB (site.mem_mb_per_gpu default {default} MB)")
    assert 0 < peak_mb < default


def test_nccl_initialises_and_says_so_with_network_env(tmp_path):
    run, record = trained(tmp_path, gpu_config())
    log = run.log.read_text()
    assert "NCCL INFO" in log and "Init COMPLETE" in log, log[-4000:]
    assert record["launch"]["backend"] == "nccl"


def test_what_snakeddp_reads_from_the_driver_agrees_with_torch_and_nvidia_smi():
    """The workflow sizes runs from the driver's files, without torch (snakeddp.util.gpus), and the
    stand-ins (tests/gpu_standin.py) imitate those files: here they are the driver's own."""
    import torch

    from snakeddp.environment.cuda import check_device
    from snakeddp.util import gpus as driver

    env = {key: value for key, value in subprocess_env().items() if key != driver.VISIBLE}
    query = ["nvidia-smi", "--query-gpu=name,uuid,driver_version", "--format=csv,noheader"]
    listed = subprocess.check_output(query, text=True).splitlines()
    rows = [[part.strip() for part in line.split(",")] for line in listed]
    installed = driver.installed()
    assert [(gpu.model, gpu.uuid) for gpu in installed] == [(name, uuid) for name, uuid, _ in rows], rows
    assert len(installed) == torch.cuda.device_count() >= 1 and driver.driver_version() == rows[0][2]
    assert sorted(torch.cuda.get_device_name(i) for i in range(len(installed))) == sorted(g.model for g in installed)
    assert driver.visible(env) == installed and driver.visible({driver.VISIBLE: ""}) == []
    assert driver.visible({driver.VISIBLE: installed[-1].uuid[:12]}) == installed[-1:]
    shown = f"{len(installed)} GPU{'s' if len(installed) > 1 else ''} ("
    assert driver.describe(env).startswith(shown), driver.describe(env)
    device = check_device(0, env)
    assert (device.name, device.capability, device.cuda) == (
        installed[0].model,
        torch.cuda.get_device_capability(0),
        torch.version.cuda,
    ), device
    # NVML's capabilities, which the checks read before any CUDA call, are CUDA's own.
    assert [gpu.capability for gpu in installed] == [torch.cuda.get_device_capability(i) for i in range(len(installed))]


def test_the_builds_table_is_the_real_builds_arch_list():
    """util/cudabuild's table, which refuses GPUs before the queue (a V100 under 13.0), against what the installed
    CUDA build of torch really has kernels for (tests/environment/test_cuda.py checks the stand-ins' lists)."""
    import torch

    from snakeddp.util import cudabuild

    real = sorted(set(cudabuild.arch_capabilities(torch.cuda.get_arch_list())))
    major, minor = torch.cuda.get_device_capability(0)
    assert cudabuild.has_kernels(torch.version.cuda, 10 * major + minor), "this GPU trained the matrix above"
    if torch.version.cuda in cudabuild.BUILD_CAPABILITIES:
        assert tuple(real) == cudabuild.BUILD_CAPABILITIES[torch.version.cuda], (torch.__version__, real)
    else:
        # A build the table does not know (an image's cu128): nothing is refused before the queue for it, and the
        # rank's check reads this real list, which must then have kernels for this GPU.
        assert any(cudabuild.runs_on(code, 10 * major + minor) for code in real), (torch.__version__, real)
