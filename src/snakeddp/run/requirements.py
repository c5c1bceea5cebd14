"""What a run's config needs from where it trains: a strategy and a precision the accelerator can run as asked,
the packages of its strategy and trackers. Imports no torch, so the workflow checks this when it
starts (snakeddp.workflow.plan and preflight) and the training process again where it
builds the strategy and the trackers.
"""

from __future__ import annotations

import importlib.util

from snakeddp.errors import PrecisionError, StrategyError, TrackerError, add_hint
from snakeddp.util.words import listed

STRATEGIES = ("ddp", "fsdp", "deepspeed")
# The package each tracker needs, only when enabled: the module it imports, and the distribution that installs
# it where that is another name (full `mlflow` requires pyarrow<26, which the core's pyarrow 26 rules out;
# mlflow-skinny is the client, the same `mlflow` module).
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
DISTRIBUTIONS = {"mlflow": "mlflow-skinny"}


def on_the_cpu(requested: str) -> tuple[str, str]:
    """Why a run trains on the CPU, and how it would train on GPUs instead, as its launch.accelerator (``requested``)
    says: auto decided cpu here (too few GPUs for its ranks, or none the installed torch runs on), or cpu was asked."""
    if requested == "auto":
        return (
            "launch.accelerator auto trains this run on the CPU here (no GPU for each of its ranks that the "
            "installed torch runs on: `snakemake -n` says why)",
            "run it where auto finds them, or set launch.accelerator: gpu to be told what is missing",
        )
    return (
        "this run trains on the CPU (launch.accelerator: cpu)",
        "run on GPU nodes with launch.accelerator: gpu (or auto)",
    )


def check_strategy(name: str, accelerator: str, requested: str = "cpu") -> None:
    """A StrategyError when ``trainer.strategy`` cannot run on ``accelerator`` (cpu or gpu) here; ``requested``:
    the run's launch.accelerator, which the HINT speaks of as it is."""
    if name == "fsdp" and accelerator != "gpu":
        why, instead = on_the_cpu(requested)
        raise StrategyError(
            f"trainer.strategy=fsdp needs GPUs: Lightning's FSDPStrategy refuses accelerator='cpu', and {why}. "
            f"HINT: use trainer.strategy: ddp on CPU, or {instead}."
        )
    if name == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        # The strategy that shards without a package of its own runs on GPUs only (above).
        other = "fsdp, which needs nothing extra" if accelerator == "gpu" else "ddp, which needs nothing extra here"
        raise StrategyError(
            "trainer.strategy=deepspeed needs the deepspeed package, which is not installed in this "
            f"environment. {add_hint('deepspeed', 'train')}; or use trainer.strategy: {other}."
        )
    if name not in STRATEGIES:
        raise StrategyError(f"trainer.strategy={name!r} is not one of {', '.join(STRATEGIES)}")


def check_precision(precision: str, accelerator: str, requested: str = "cpu") -> None:
    """A PrecisionError for ``trainer.precision`` that Lightning would train as something else on ``accelerator``:
    16-mixed on the CPU, which has no fp16 autocast, becomes bf16-mixed with a warning while the run's record
    would say 16-mixed."""
    if precision == "16-mixed" and accelerator != "gpu":
        why, instead = on_the_cpu(requested)
        raise PrecisionError(
            f"trainer.precision=16-mixed, and {why}, which has no fp16 autocast: Lightning would train "
            "bf16-mixed instead while the run's record said 16-mixed. HINT: set trainer.precision: bf16-mixed "
            f"(or 32-true) for CPU runs, or {instead}."
        )


def require_tracker(key: str) -> None:
    """A TrackerError when tracker ``key`` is enabled but its package is not installed."""
    require_trackers([key])


def require_trackers(keys: list[str]) -> None:
    """One TrackerError naming every tracker of ``keys`` (each enabled) whose package is not installed, with one
    command that installs them all: three trackers switched on at once are one round of the HINT, not three."""
    missing = [key for key in keys if importlib.util.find_spec(TRACKER_PACKAGES[key]) is None]
    if not missing:
        return
    packages = [TRACKER_PACKAGES[key] for key in missing]
    distributions = " ".join(DISTRIBUTIONS.get(package, package) for package in packages)
    if len(missing) == 1:
        (key,), (package,) = missing, packages
        raise TrackerError(
            f"tracking.{key}.enabled is true but the {package} package is not installed in the training "
            f"environment. {add_hint(distributions, 'train')}; or set tracking.{key}.enabled: false."
        )
    raise TrackerError(
        f"{listed(f'tracking.{key}.enabled' for key in missing)} are true but the {listed(packages)} packages are "
        f"not installed in the training environment. {add_hint(distributions, 'train')}; or set each of them to "
        "false."
    )
