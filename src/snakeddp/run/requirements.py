"""What a run's config needs from where it trains: a strategy the accelerator can run, the
packages of its strategy and trackers. Imports no torch, so the workflow checks this when it
starts (snakeddp.workflow.plan and preflight) and the training process again where it
builds the strategy and the trackers.
"""

from __future__ import annotations

import importlib.util

from snakeddp.errors import StrategyError, TrackerError, add_hint

STRATEGIES = ("ddp", "fsdp", "deepspeed")
# The package each tracker needs, only when enabled: the module it imports, and the distribution that installs
# it where that is another name (full `mlflow` requires pyarrow<26, which the core's pyarrow 26 rules out;
# mlflow-skinny is the client, the same `mlflow` module).
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
DISTRIBUTIONS = {"mlflow": "mlflow-skinny"}


def check_strategy(name: str, accelerator: str) -> None:
    """A StrategyError when ``trainer.strategy`` cannot run on ``accelerator`` (cpu or gpu) here."""
    if name == "fsdp" and accelerator != "gpu":
        raise StrategyError(
            "trainer.strategy=fsdp needs GPUs: Lightning's FSDPStrategy refuses accelerator='cpu', and this run "
            "trains on the CPU. HINT: use trainer.strategy: ddp on CPU, or run on GPU nodes with "
            "launch.accelerator: gpu (or auto)."
        )
    if name == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise StrategyError(
            "trainer.strategy=deepspeed needs the deepspeed package, which is not installed in this "
            f"environment. {add_hint('deepspeed', 'train')}; or use trainer.strategy: fsdp, which needs nothing extra."
        )
    if name not in STRATEGIES:
        raise StrategyError(f"trainer.strategy={name!r} is not one of {', '.join(STRATEGIES)}")


def require_tracker(key: str) -> None:
    """A TrackerError when tracker ``key`` is enabled but its package is not installed."""
    package = TRACKER_PACKAGES[key]
    if importlib.util.find_spec(package) is None:
        raise TrackerError(
            f"tracking.{key}.enabled is true but the {package} package is not installed in the training "
            f"environment. {add_hint(DISTRIBUTIONS.get(package, package), 'train')}; or set "
            f"tracking.{key}.enabled: false."
        )
