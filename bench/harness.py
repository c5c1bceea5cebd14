"""What every benchmark shares: sizes, side-by-side timing, figures, datasets, subprocesses.

Comparisons are measured in one process run, alternating the cases (ABBA order, so a drift in
machine load hits every case alike), after warm-up rounds, and summarised by medians: on a
shared, noisy machine the ratios hold even when absolute times do not.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from snakeddp.util.handoff import SOCKET as WARM_SOCKET

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
MB = 1e6


@dataclass(frozen=True)
class Sizes:
    """Problem sizes and repetitions; ``None`` means each benchmark's own default."""

    records: int = 10_000
    features: int = 1_000
    val_records: int = 10_000
    partitions: int | None = None
    reps: int | None = None
    warmup: int | None = None
    sweep_runs: int = 32
    workflow_partitions: int = 1_000
    tiny: bool = False

    def reps_or(self, default: int) -> int:
        return self.reps if self.reps is not None else default

    def warmup_or(self, default: int) -> int:
        return self.warmup if self.warmup is not None else default

    def partitions_or(self, default: int) -> int:
        return self.partitions if self.partitions is not None else default

    @property
    def partition_bytes(self) -> int:
        """Bytes of one train partition's features and labels (ids are extra in our format)."""
        return self.records * (self.features + 1) * 4


# The smallest sizes at which every benchmark still measures each of its cases (two partitions: an epoch
# switches partition; the data stage's 4x round), for checking the harness.
TINY = Sizes(
    records=600,
    features=16,
    val_records=200,
    partitions=2,
    reps=1,
    warmup=0,
    sweep_runs=4,
    workflow_partitions=8,
    tiny=True,
)


@dataclass
class Context:
    """Where a benchmark may write and the sizes it runs at."""

    sizes: Sizes
    #: Scratch space, deleted after the benchmark (unless --keep).
    work: Path
    #: Kept next to results.json (profiles and other evidence).
    out: Path

    def scratch(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass
class Figure:
    """One row of results.md: ours vs the baseline and the machine's limit, with the ratio the target is on."""

    key: str
    label: str
    unit: str
    ours: float | None
    baseline: float | None = None
    limit: float | None = None
    ratio: float | None = None
    ratio_of: str = ""
    target: str = ""
    met: bool | None = None


@dataclass
class Result:
    """A benchmark's figures, the notes that explain them, and every raw sample."""

    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def meets(value: float | None, op: str, threshold: float) -> bool | None:
    if value is None:
        return None
    return value >= threshold if op == ">=" else value <= threshold


def target_figure(
    key: str,
    label: str,
    unit: str,
    ours: float | None,
    *,
    baseline: float | None = None,
    limit: float | None = None,
    ratio: float | None,
    ratio_of: str,
    op: str | None = None,
    threshold: float | None = None,
) -> Figure:
    """A figure whose ratio is checked against ``op threshold`` (no target when op is None)."""
    target = f"{'≥' if op == '>=' else '≤'} {threshold:g}" if op else ""
    met = meets(ratio, op, threshold) if op else None
    return Figure(key, label, unit, ours, baseline, limit, ratio, ratio_of, target, met)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


Case = Callable[[], Mapping[str, float] | None]


def alternate(cases: Mapping[str, Case], reps: int, warmup: int = 1) -> dict[str, list[dict[str, float]]]:
    """Run the cases in turn, ``warmup`` discarded rounds then ``reps`` kept ones.

    Odd rounds run in reverse order (ABBA), so neither case always runs first. A case may return
    its own measurements (a dict); ``wall_s`` (the whole call) is always added.
    """
    names = list(cases)
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_index in range(warmup + reps):
        for name in names if round_index % 2 == 0 else reversed(names):
            start = time.perf_counter()
            measured = dict(cases[name]() or {})
            measured.setdefault("wall_s", time.perf_counter() - start)
            if round_index >= warmup:
                samples[name].append(measured)
    return samples


def medians(samples: Sequence[Mapping[str, float]], metric: str) -> float:
    return median([s[metric] for s in samples if s.get(metric) is not None])


def paired_ratio(
    numerators: Sequence[Mapping[str, float]], denominators: Sequence[Mapping[str, float]], metric: str, other: str = ""
) -> float:
    """Median over rounds of one case's ``metric`` over another's (``other``, default the same metric).

    Each round ran both cases back to back, so their ratio sees one machine load; the median of
    those ratios is steadier than a ratio of two medians taken at different moments.
    """
    return median([n[metric] / d[other or metric] for n, d in zip(numerators, denominators, strict=True)])


def evict(path: str | Path) -> None:
    """Drop a file's pages from the page cache (it must be clean: written and fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def child_env(threads: int = 1, **extra: str) -> dict[str, str]:
    """Environment for the processes benchmarks start: this checkout's package, ``threads`` each, and no warm
    process kept by `snakeddp warm` (each invocation measured as it runs by default, with its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_")) and k != WARM_SOCKET}
    path = os.pathsep.join(p for p in (str(SRC), str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(
        PYTHONPATH=path,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_checked(argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run a command to completion; raise with its output tail if it fails."""
    done = subprocess.run(
        list(argv), cwd=cwd, env=dict(env or child_env()), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"benchmark command failed ({done.returncode}): {' '.join(argv)}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout + done.stderr


def busy_note() -> str | None:
    """A note for results measured while other processes competed for the CPUs (load above the CPU count)."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cpus:
        return None
    return (
        f"Measured on a busy machine (load average {load:.1f} on {cpus} CPUs at the end of the run): the ratios "
        "of cases measured side by side in the same rounds still hold roughly; absolute times are inflated."
    )


def machine() -> dict[str, Any]:
    """What the numbers were measured on (printed with them; absolute times only make sense with it)."""
    # The versions from the packages' metadata: importing torch for its version cost every `python -m bench`
    # 2.2 s of CPU, where the benchmarks that only start processes (workflow, sweep, ...) import it nowhere else.
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "numpy": metadata.version("numpy"),
        "platform": platform.platform(),
        "executable": sys.executable,
    }
