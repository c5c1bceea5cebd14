"""Frozen typed parts of a validated config: ``Launch``, ``Site``, ``Trainer``, ``Data`` and ``Tracking``.

A module takes the part it needs and reads typed fields (``launch.devices``). Built once, where a
section enters the code::

    from snakeddp.config import parts

    launch = parts.Launch.of(run.config["launch"])  # one section of a validated config or run config
    every = parts.of(config)  # all five, from a validated full config

The schema stays the one source of keys and defaults: no field has a default, each is filled from a
section that ``snakeddp.config.validate`` filled, and ``of`` refuses a section with a key missing or one
no field holds (tests/config/test_parts.py holds every schema key to a field). The dict stays what a
run's identity hashes and run.yaml and provenance record; a part is only how code reads it.

Shapes: the schema's objects with fixed keys are nested parts (``Trainer.monitor``,
``Trainer.early_stopping``, ``Data.table``, ``Tracking.tensorboard``/``mlflow``/``wandb``); its
free-form maps (``trainer.strategy_options``, ``data.module_kwargs``) are read-only Mappings, frozen
all the way down (``thaw`` gives plain dicts and lists back); arrays are tuples. A key the schema holds to
an ``enum`` (or a ``const``) is a ``Literal`` of the same values (``Launcher``, ``Precision``...), which
tests/config/test_parts.py holds equal to the schema's.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar

import snakeddp.config as configuration
from snakeddp.errors import ConfigError
from snakeddp.util import yamltext

P = TypeVar("P", bound="Part")

# The schema's enumerations, as the fields that hold them are typed.
# A launcher: the schema's auto, direct, torchrun or mpirun, or one a platform owns (its row's own_launchers: srun,
# torchdistributor), which the schema's enum takes in from the registry; so no closed Literal here.
Launcher = str
Accelerator = Literal["auto", "cpu", "gpu"]
Device = Literal["cpu", "gpu"]  # what an accelerator resolves to
Mode = Literal["min", "max"]
Strategy = Literal["ddp", "fsdp", "deepspeed"]
Precision = Literal["32-true", "bf16-mixed", "16-mixed"]
MatmulPrecision = Literal["highest", "high", "medium"]
PreemptSignal = Literal["SIGUSR1", "SIGUSR2", "SIGTERM"]
Source = Literal["synthetic", "table", "module"]
TableFormat = Literal["auto", "csv", "parquet", "delta", "images"]
Unseen = Literal["error", "oov"]
NanPolicy = Literal["error", "drop"]
Channels = Literal[1, 3]
Labels = Literal["teacher", "random"]


class Part:
    """What every part shares: its dotted key in the config, and ``of`` that builds it from its section."""

    key: ClassVar[str]

    @classmethod
    def of(cls: type[P], section: Mapping[str, Any]) -> P:
        """The part of a validated section. A run config leaves ``QUIET_AT_DEFAULT`` keys out at their
        default, so those come from the schema's defaults."""
        if not isinstance(section, Mapping):
            raise ConfigError(
                f"{cls.key}: expected a mapping to build parts.{cls.__name__} from, got {type(section).__name__}. "
                f'HINT: pass the validated section, e.g. parts.{cls.__name__}.of(config["{cls.key.split(".")[0]}"]).'
            )
        return _build(cls, section)


def _build(cls: type[P], section: Mapping[str, Any]) -> P:
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(section) - set(names))
    if unknown:
        raise ConfigError(
            f"{cls.key}.{unknown[0]} has no field in parts.{cls.__name__}. HINT: add a field for each key "
            "config/schema.yaml defines (tests/config/test_parts.py lists them), or validate the config first."
        )
    values = {}
    for name in names:
        dotted = f"{cls.key}.{name}"
        if name in section:
            value = section[name]
        elif dotted in configuration.QUIET_AT_DEFAULT:
            value = _schema_default(dotted)
        else:
            raise ConfigError(
                f"{dotted} is missing, so parts.{cls.__name__} cannot be built. HINT: build parts from a "
                "validated config (snakeddp.config.load or validate fill in every default) or a run's run.yaml."
            )
        values[name] = _shaped(hints[name], value)
    return cls(**values)


def _schema_default(dotted: str) -> Any:
    node: Any = configuration.defaults()
    for name in dotted.split("."):
        node = node[name]
    return node


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _shaped(hint: Any, value: Any) -> Any:
    """A section's value in its field's shape: a nested part, a frozen map, a tuple, or as it is."""
    if isinstance(hint, type) and issubclass(hint, Part):
        return hint.of(value)
    origin = typing.get_origin(hint)
    if origin is Mapping or origin is tuple:
        return _frozen(value)
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """A part, frozen map or tuple as plain dicts and lists (a copy): a part as the section it was built
    from, for code outside snakeddp that mutates or type-checks what it is given (a strategy's keyword
    arguments). ``dataclasses.asdict`` cannot copy a part's read-only maps."""
    if isinstance(value, Part):
        return {f.name: thaw(getattr(value, f.name)) for f in dataclasses.fields(value)}  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


@dataclass(frozen=True)
class Launch(Part):
    """``launch``: how many processes a run starts, on what, and what it asks the scheduler for."""

    key: ClassVar[str] = "launch"

    launcher: Launcher
    """How processes start: auto, direct, torchrun, mpirun, or a launcher a platform owns (srun, torchdistributor)."""
    nodes: int
    """Nodes the run spans."""
    devices: int
    """Training processes per node (GPUs per node on GPU machines)."""
    accelerator: Accelerator
    """auto, cpu or gpu; auto is resolved by the platform (config.site.resolved)."""
    threads_per_process: int
    """OMP/MKL threads of each training process."""
    master_port: int | None
    """Rendezvous port of rank 0; None derives one."""
    mem_mb: int | None
    """Memory per node the scheduler reserves, in MB; None sizes it by device. Outside a run's identity."""
    runtime: int
    """Wall-clock limit of a training job, in minutes. Outside a run's identity."""
    hang_timeout: float | Literal["auto"] | None
    """Seconds a rank may go without progress (snakeddp.cluster.hang): auto, a number, or None (no watch).
    Outside a run's identity."""
    straggler: Literal["name", "stop"] | None
    """What a slow rank gets (snakeddp.cluster.pace): named, the run stopped, or None (not scored). Outside a run's
    identity, as are the next two."""
    straggler_ratio: float
    """Below this share of the fastest rank's pace a rank is slow."""
    straggler_window: float
    """Seconds a rank must stay slow before it is named."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices


@dataclass(frozen=True)
class Site(Part):
    """``site``: what the profile declares about the nodes of a cluster."""

    key: ClassVar[str] = "site"

    accelerator: Device | None
    """cpu or gpu, what launch.accelerator auto means there; None: not declared."""
    gpu_type: str | None
    """The GPU type Slurm jobs ask for (--gres=gpu:TYPE:N); None asks for any GPU."""
    mem_mb_per_gpu: int
    """Host memory reserved per GPU rank when launch.mem_mb is None, in MB."""
    cpus_per_gpu: int
    """CPU cores reserved per GPU rank (at least launch.threads_per_process)."""
    exclude_after_events: int | None
    """Slurm leaves out a node with this many events in results/nodes.json; None: none."""
    exclude_within_days: float
    """How far back those events count, in days."""


@dataclass(frozen=True)
class Monitor(Part):
    """``trainer.monitor``: the metric epochs are ranked by."""

    key: ClassVar[str] = "trainer.monitor"

    metric: str
    """A metric the model logs (val_loss)."""
    mode: Mode
    """min when lower is better, max when higher is."""


@dataclass(frozen=True)
class EarlyStopping(Part):
    """``trainer.early_stopping``: when a run stops before trainer.max_epochs."""

    key: ClassVar[str] = "trainer.early_stopping"

    enabled: bool
    """Whether a run stops once the monitored metric stops improving."""
    patience: int
    """Epochs without improvement before it stops."""
    min_delta: float
    """The least change that counts as an improvement."""


@dataclass(frozen=True)
class Trainer(Part):
    """``trainer``: how a run trains (epochs, batches, strategy, precision, checkpoints)."""

    key: ClassVar[str] = "trainer"

    max_epochs: int
    """Epochs a run trains at most."""
    budget_continues: bool | None
    """Whether a higher max_epochs continues finished attempts; None: config.budget_continues decides."""
    batch_size: int
    """Samples per process per step."""
    monitor: Monitor
    """The metric checkpoints and early stopping rank epochs by."""
    save_top_k: int
    """Best checkpoints kept (0: only last.ckpt)."""
    early_stopping: EarlyStopping
    """When a run stops early."""
    strategy: Strategy
    """ddp, fsdp or deepspeed."""
    strategy_options: Mapping[str, Any]
    """Keyword arguments of the strategy (a free-form map, read-only)."""
    precision: Precision
    """Lightning's precision: 32-true, bf16-mixed or 16-mixed."""
    matmul_precision: MatmulPrecision
    """torch.set_float32_matmul_precision: highest, high or medium."""
    deterministic: bool
    """Whether torch uses deterministic algorithms only."""
    trace_samples: bool
    """Whether the sample ids each rank trains on are recorded (trace/)."""
    preempt_signals: tuple[PreemptSignal, ...]
    """Signals that save last.ckpt and stop every rank at the same step."""


@dataclass(frozen=True)
class Table(Part):
    """``data.table``: the table a ``data.source: table`` run reads."""

    key: ClassVar[str] = "data.table"

    path: str | None
    """The table's file, folder or URI."""
    format: TableFormat
    """auto, csv, parquet, delta or images (a folder of class folders)."""
    version: int | None
    """A Delta table's version; None: the latest."""
    table_id: str | None
    """A Delta table's id, recorded with its version; set, it pins the table."""
    features: tuple[str, ...]
    """The feature columns, in the order the model sees them; empty: all but the label (resolved when planning)."""
    feature_pattern: str | None
    """With features empty, the glob the columns taken must match; None: all."""
    exclude: tuple[str, ...]
    """With features empty, columns left out."""
    categories: tuple[str, ...]
    """Columns encoded as categories whatever their type."""
    unseen: Unseen
    """error or oov: what a category value outside the vocabulary does at inference."""
    label: str | None
    """The label column."""
    val_fraction: float
    """Share of rows held out for validation."""
    nan_policy: NanPolicy
    """error or drop: what a row with a missing value does."""
    sha256: str | None
    """Checksum of the table's files; None lets the workflow compute it."""


@dataclass(frozen=True)
class Image(Part):
    """``data.image``: what an image column becomes in the partitions."""

    key: ClassVar[str] = "data.image"

    size: tuple[int, ...] | None
    """(height, width) images are resized and centre-cropped to; None: their own, the same for all."""
    channels: Channels
    """1 (grayscale) or 3 (RGB)."""
    max_pixels: int
    """Largest image decoded (width x height)."""
    max_bytes: int
    """Largest encoded image, in bytes."""


@dataclass(frozen=True)
class Augment(Part):
    """``data.augment``: augmentation of image batches in snakeddp's DataModule."""

    key: ClassVar[str] = "data.augment"

    flip: bool
    """Whether half the training images are mirrored left to right."""
    crop_padding: int
    """Pixels of padding before a seeded random crop back to size; 0: none."""
    normalize: bool
    """Whether pixels are standardised per channel (else only scaled to [0, 1])."""


@dataclass(frozen=True)
class Data(Part):
    """``data``: the dataset a run trains on, and how it is made."""

    key: ClassVar[str] = "data"

    name: str
    """Readable start of the dataset's directory name."""
    source: Source
    """synthetic, table or module."""
    table: Table
    """The table of source table."""
    image: Image
    """What an image column becomes."""
    augment: Augment
    """Augmentation of image batches."""
    module: str | None
    """A user's DataModule (package.module:Class) for source module."""
    module_kwargs: Mapping[str, Any]
    """Keyword arguments of that DataModule (a free-form map, read-only)."""
    seed: int
    """Data seed: partition i is a pure function of it, the parameters below and i."""
    num_train_files: int
    """Training partitions."""
    num_records_per_train_file: int
    """Samples per train partition."""
    num_val_records: int
    """Samples in the validation file."""
    num_features: int
    """Features per sample."""
    num_classes: int
    """1: binary labels with a logistic loss; 2 or more: that many classes."""
    labels: Labels
    """teacher (learnable) or random synthetic labels."""
    label_noise: float
    """With teacher labels, the fraction replaced by a random class."""


@dataclass(frozen=True)
class TensorBoard(Part):
    """``tracking.tensorboard``."""

    key: ClassVar[str] = "tracking.tensorboard"

    enabled: bool
    """Whether to write TensorBoard events."""


@dataclass(frozen=True)
class MLflow(Part):
    """``tracking.mlflow``."""

    key: ClassVar[str] = "tracking.mlflow"

    enabled: bool
    """Whether to log to MLflow."""
    tracking_uri: str | None
    """An MLflow server URL or file store path; None: MLFLOW_TRACKING_URI, else results/mlruns."""
    experiment: str
    """The MLflow experiment runs are logged under."""
    log_checkpoint: bool
    """Whether the best checkpoint is uploaded as an artifact."""
    register_model: str | None
    """A registered model name the best checkpoint becomes a version of; None: not registered."""


@dataclass(frozen=True)
class WandB(Part):
    """``tracking.wandb``."""

    key: ClassVar[str] = "tracking.wandb"

    enabled: bool
    """Whether to log to W&B (offline)."""
    project: str
    """The W&B project."""


@dataclass(frozen=True)
class Tracking(Part):
    """``tracking``: the experiment trackers rank 0 reports to. Outside a run's identity."""

    key: ClassVar[str] = "tracking"

    tensorboard: TensorBoard
    mlflow: MLflow
    wandb: WandB


class Settings(Part):
    """A platform's own section (its row's ``section``, the part's ``key``): a part its package defines, with
    the JSON Schema of the section's keys in ``schema_file`` beside it. The config's schema takes every
    registered platform's in (snakeddp.config.schema), so a platform brings its settings with it, a plugin's
    too, and config/schema.yaml never lists them."""

    schema_file: ClassVar[Path]

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The section's JSON Schema (its keys, types, defaults and descriptions)."""
        return yamltext.safe_load(cls.schema_file.read_text(encoding="utf-8"))


# Each top-level part of ``of``, by its section.
SECTIONS: tuple[type[Part], ...] = (Launch, Site, Trainer, Data, Tracking)


@dataclass(frozen=True)
class Parts:
    """Every top-level part of one validated config."""

    launch: Launch
    site: Site
    trainer: Trainer
    data: Data
    tracking: Tracking


def of(config: Mapping[str, Any]) -> Parts:
    """The parts of a validated full config (a run config has only launch, trainer and data: build those
    one at a time)."""
    missing = [part.key for part in SECTIONS if part.key not in config]
    if missing:
        raise ConfigError(
            f"the config has no {', '.join(missing)} section, so parts.of cannot build it. HINT: pass a config "
            "validated by snakeddp.config.load or validate; for a run config use parts.Launch.of(run['launch'])."
        )
    return Parts(**{part.key: part.of(config[part.key]) for part in SECTIONS})
