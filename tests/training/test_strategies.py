"""trainer.strategy: ddp by default, fsdp (GPU only, as Lightning decides), deepspeed when installed."""

from __future__ import annotations

import importlib.util
import json

import lightning.pytorch as pl
import pytest
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

from snakeddp import config
from snakeddp.config import parts
from snakeddp.run import attempt as runstate
from snakeddp.training.strategies import StrategyError, build_strategy
from snakeddp.training.trainer import AtomicCheckpointIO
from tests.helpers import launch, prepare


def trainer_cfg(**overrides):
    return parts.Trainer.of(config.validate({"trainer": overrides})["trainer"])


def build(accelerator="cpu", backend="gloo", **overrides):
    environment, io = LightningEnvironment(), AtomicCheckpointIO()
    return build_strategy(trainer_cfg(**overrides), accelerator, backend, environment, io), environment, io


def test_ddp_is_the_default_on_the_launchers_environment():
    strategy, environment, io = build()
    assert type(strategy) is DDPStrategy
    assert strategy.cluster_environment is environment and strategy.checkpoint_io is io
    assert strategy.process_group_backend == "gloo"


def test_lightning_itself_refuses_fsdp_on_cpu():
    """The premise of our own error: Lightning 2.6's FSDPStrategy will not run with accelerator='cpu'."""
    with pytest.raises(ValueError, match="requires a GPU accelerator"):
        pl.Trainer(accelerator="cpu", devices=1, strategy=FSDPStrategy(), logger=False)


def test_fsdp_on_cpu_is_refused_with_a_hint():
    with pytest.raises(StrategyError, match="trainer.strategy=fsdp needs GPUs.*HINT: use trainer.strategy: ddp on CPU"):
        build(strategy="fsdp")


def test_fsdp_on_gpu_gets_the_launchers_environment_and_the_options():
    strategy, environment, io = build(
        "gpu",
        "nccl",
        strategy="fsdp",
        strategy_options={"sharding_strategy": "SHARD_GRAD_OP", "auto_wrap_min_params": 1000},
    )
    assert isinstance(strategy, FSDPStrategy)
    assert strategy.cluster_environment is environment and strategy.checkpoint_io is io
    assert strategy.process_group_backend == "nccl" and strategy.sharding_strategy.name == "SHARD_GRAD_OP"
    assert strategy.kwargs["auto_wrap_policy"].keywords == {"min_num_params": 1000}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"state_dict_type": "sharded"}, "state_dict_type must be 'full'"),
        ({"cluster_environment": "x"}, "may not set cluster_environment"),
        ({"no_such_option": 1}, "are not accepted"),
    ],
)
def test_bad_strategy_options_are_named(options, message):
    with pytest.raises(StrategyError, match=message):
        build("gpu", "nccl", strategy="fsdp", strategy_options=options)


def test_fsdp_options_without_state_dict_type_as_hinted_build():
    with pytest.raises(StrategyError, match="HINT: remove state_dict_type"):
        build("gpu", "nccl", strategy="fsdp", strategy_options={"state_dict_type": "sharded"})
    strategy, _, _ = build("gpu", "nccl", strategy="fsdp", strategy_options={"auto_wrap_min_params": 9})
    assert strategy.kwargs["auto_wrap_policy"].keywords == {"min_num_params": 9}


def test_deepspeed_without_the_package_is_a_clear_error():
    assert importlib.util.find_spec("deepspeed") is None, "deepspeed is in no lock file of this project"
    with pytest.raises(StrategyError, match="needs the deepspeed package, which is not installed") as on_cpu:
        build(strategy="deepspeed")
    # The strategy the line offers instead builds where the run is: ddp on the CPU, fsdp on GPUs.
    assert str(on_cpu.value).endswith("or use trainer.strategy: ddp, which needs nothing extra here.")
    build(strategy="ddp")
    with pytest.raises(StrategyError, match="or use trainer.strategy: fsdp, which needs nothing extra"):
        build("gpu", "nccl", strategy="deepspeed")
    build("gpu", "nccl", strategy="fsdp")


@pytest.mark.e2e
def test_fsdp_run_on_cpu_stops_every_rank_with_our_error(tmp_path):
    """Both ranks refuse FSDP on the CPU (the first to fail writes the run's one line, and the supervisor
    stops the other if it is still there). The launcher returns with no rank left: none still holds the
    run directory's attempt lock, which every training process holds for its lifetime. What it said is
    that line, once, and nothing else: no traceback."""
    run_yaml, manifest, run_dir = prepare(tmp_path, {"launch": {"devices": 2}, "trainer": {"strategy": "fsdp"}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    shown = done.stdout + done.stderr
    assert done.returncode == 1, shown
    assert "snakeddp.cluster.supervisor --nproc-per-node=2 " in done.stdout, "two ranks started"
    lines = [line for line in shown.splitlines() if "trainer.strategy=fsdp needs GPUs" in line]
    assert len(lines) == 1 and lines[0].startswith("snakeddp.train: ") and "HINT:" in lines[0], shown
    assert done.stderr == f"{lines[0]}\n" and "Traceback" not in shown, shown
    assert (run_dir / "failure.txt").read_text() == f"{lines[0]}\n"
    runstate.ensure_no_live_attempt(run_dir)  # raises while any rank of the run is still there
    assert not (run_dir / "provenance.json").exists()


@pytest.mark.gpu
@pytest.mark.e2e
def test_fsdp_trains_the_mlp_to_the_val_loss_of_ddp_on_gpus(tmp_path):
    """Runs only where CUDA is present: selected with `pytest -m gpu`, deselected everywhere else."""
    import torch

    devices = min(2, torch.cuda.device_count())
    assert devices >= 1, "this test needs a CUDA GPU; run it with `pytest -m gpu` on a GPU machine"
    losses = {}
    for strategy in ("ddp", "fsdp"):
        overrides = {
            "launch": {"devices": devices, "accelerator": "gpu"},
            "trainer": {"strategy": strategy, "max_epochs": 3, "early_stopping": {"enabled": False}},
        }
        run_yaml, manifest, run_dir = prepare(tmp_path / strategy, overrides)
        done = launch(run_yaml, manifest, run_dir, cwd=tmp_path / strategy)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        record = json.loads((run_dir / "provenance.json").read_text())
        assert record["launch"]["strategy"] == strategy and record["launch"]["backend"] == "nccl"
        losses[strategy] = record["training"]["best_val_loss"]
    assert losses["fsdp"] == pytest.approx(losses["ddp"], rel=0.02, abs=2e-3)
