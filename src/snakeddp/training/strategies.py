"""The Lightning strategy of a run (``trainer.strategy``): ddp, fsdp or deepspeed.

Every strategy gets the launcher's ClusterEnvironment and the process-group backend chosen for
the accelerator, so the ranks come from the same launcher logic (torchrun, srun, mpirun, AzureML)
whatever the strategy. ``trainer.strategy_options`` are passed to the strategy's class, with
one translation YAML needs: fsdp's ``auto_wrap_min_params: N`` wraps every submodule of at
least N parameters in its own FSDP unit (torch's size-based policy).

Lightning's FSDPStrategy runs on GPUs only: it refuses ``accelerator="cpu"``, so fsdp on a CPU
run is refused here first, with a hint. DeepSpeed is optional and checked for up front.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.strategies import DDPStrategy, Strategy

from snakeddp.cluster.hang import HangTimeout
from snakeddp.config import parts
from snakeddp.config.targets import accepted_parameters
from snakeddp.errors import StrategyError
from snakeddp.run.requirements import check_strategy


def _fsdp_options(options: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(options)
    if options.get("state_dict_type", "full") != "full":
        raise StrategyError(
            "trainer.strategy_options.state_dict_type must be 'full': snakeddp resumes from, hashes and "
            "records single-file checkpoints (last.ckpt). HINT: remove state_dict_type."
        )
    min_params = options.pop("auto_wrap_min_params", None)
    if min_params is not None:
        from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

        options["auto_wrap_policy"] = functools.partial(size_based_auto_wrap_policy, min_num_params=int(min_params))
    return options


def strategy_class(name: str, accelerator: str, requested: str = "cpu") -> type[Strategy]:
    """The Lightning class of ``trainer.strategy``, or a StrategyError saying why it cannot run here
    (``requested``: the run's launch.accelerator, which the HINT speaks of)."""
    check_strategy(name, accelerator, requested)
    if name == "fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        return FSDPStrategy
    if name == "deepspeed":
        from lightning.pytorch.strategies import DeepSpeedStrategy

        return DeepSpeedStrategy
    return DDPStrategy


def build_strategy(
    trainer_cfg: parts.Trainer,
    accelerator: str,
    backend: str,
    cluster_environment: ClusterEnvironment,
    checkpoint_io: CheckpointIO,
    requested: str = "cpu",
    hang_timeout: HangTimeout | None = None,
) -> Strategy:
    """The configured strategy on the launcher's cluster environment and process-group backend, its process
    group's timeout (gloo's and NCCL's collectives, the rendezvous) from launch.hang_timeout; ``requested``:
    the run's launch.accelerator (auto, or what ``accelerator`` is)."""
    name = trainer_cfg.strategy
    cls = strategy_class(name, accelerator, requested)
    options = parts.thaw(trainer_cfg.strategy_options)
    if name == "fsdp":
        options = _fsdp_options(options)
    common: dict[str, Any] = {"cluster_environment": cluster_environment, "process_group_backend": backend}
    if name != "deepspeed":  # DeepSpeed saves checkpoints with its own engine
        common["checkpoint_io"] = checkpoint_io
    if hang_timeout is not None and hang_timeout.on:
        common["timeout"] = timedelta(seconds=hang_timeout.collective_s)
    clash = sorted(set(options) & set(common))
    if clash:
        raise StrategyError(
            f"trainer.strategy_options may not set {', '.join(clash)}: snakeddp sets them (the timeout from "
            "launch.hang_timeout, the rest from the launcher). HINT: remove them from trainer.strategy_options; "
            "set launch.hang_timeout instead of a timeout."
        )
    unknown = sorted(set(options) - _accepted_options(name, cls))
    if unknown:
        raise StrategyError(
            f"trainer.strategy_options {', '.join(unknown)} are not accepted by {name} ({cls.__name__}). "
            f"HINT: use keyword arguments of lightning.pytorch.strategies.{cls.__name__}"
            + (f" or of the torch module it wraps ({WRAPPED[name]})." if name in WRAPPED else ".")
        )
    return cls(**common, **options)


# Lightning passes unknown strategy keywords on to the torch wrapper when the model is set up,
# minutes into a run; checking names against both signatures catches a typo before that.
WRAPPED = {
    "ddp": "torch.nn.parallel.DistributedDataParallel",
    "fsdp": "torch.distributed.fsdp.FullyShardedDataParallel",
}


def _accepted_options(name: str, cls: type) -> set[str]:
    accepted = accepted_parameters(cls)
    if name in WRAPPED:
        module, _, attribute = WRAPPED[name].rpartition(".")
        accepted |= accepted_parameters(getattr(importlib.import_module(module), attribute))
    return accepted
