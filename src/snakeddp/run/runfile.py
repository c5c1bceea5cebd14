"""``run.yaml``: one run's resolved config, written by the workflow and read by every rank."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from snakeddp import config as configuration
from snakeddp.util import yamltext
from snakeddp.util.fsutil import atomic_write_text

RUN_FORMAT = "snakeddp-run/1"


@dataclass(frozen=True)
class RunFile:
    """A run id, the sweep point it came from, and its validated config (seed, data, model, trainer, launch)."""

    run_id: str
    config: dict[str, Any]
    point: dict[str, Any] = field(default_factory=dict)

    @property
    def dataset_id(self) -> str:
        return configuration.dataset_id(self.config["data"])

    def as_dict(self) -> dict[str, Any]:
        return {"format": RUN_FORMAT, "run_id": self.run_id, "sweep_point": self.point, "config": self.config}

    def write(self, path: str | Path) -> None:
        atomic_write_text(path, yaml.safe_dump(self.as_dict(), sort_keys=False, allow_unicode=True))

    @classmethod
    def load(cls, path: str | Path) -> RunFile:
        """Read a run.yaml, or a plain config file without a sweep (run id ``base``)."""
        path = Path(path)
        try:
            raw = yamltext.safe_load(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise configuration.ConfigError(f"{path}: no such run file") from None
        except yaml.YAMLError as exc:
            raise configuration.ConfigError(f"{path}: not valid YAML: {exc}") from None
        if isinstance(raw, dict) and raw.get("format") == RUN_FORMAT:
            cfg = configuration.validate(raw["config"], source=str(path))
            point = raw.get("sweep_point") or {}
            _check_point(path, point, cfg)
            return cls(run_id=raw["run_id"], config=configuration.run_config(cfg), point=point)
        runs = configuration.expand_sweep(configuration.validate(raw, source=str(path)), source=str(path))
        if len(runs) != 1:
            raise configuration.ConfigError(
                f"{path} has a sweep of {len(runs)} runs; pass one run's results/runs/<run>/run.yaml instead"
            )
        ((run_id, run),) = runs.items()
        return cls(run_id=run_id, config=run["config"], point=run["point"])


def keep_scheduler_requests(run: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """``run`` (sweep point and config) as run.yaml should hold it: when an existing run.yaml differs
    from it only in scheduler requests (launch.runtime, mem_mb), the file's values stay.

    run.yaml is what a run is: rewriting it reruns training, so raising ``launch.runtime`` after a
    time limit would restart the run. The scheduler still gets the config's new values (the train
    rule's resources read the config, not this file).
    """
    try:
        written = yamltext.safe_load(Path(path).read_text(encoding="utf-8"))
        old_point, old_config = written.get("sweep_point") or {}, written["config"]
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError):
        return dict(run)
    return _with_requests_of(run, old_point, old_config)


def _check_point(path: Path, point: Mapping[str, Any], cfg: Mapping[str, Any]) -> None:
    """A run file whose config says other than its sweep point (and its run id) was edited by hand: training it
    would file one setting's results under another's name."""
    for key, value in point.items():
        found = configuration.dotted_get(cfg, key)
        if found != value:
            raise configuration.ConfigError(
                f"{path}: its config has {key}: {found!r}, and its sweep point (and run id) says {value!r}: it was "
                f"edited by hand. HINT: delete it (rm {path}) and rerun: snakemake writes it again from the config "
                "(to train another value, give it in the config's sweep)."
            )


def _with_requests_of(run: Mapping[str, Any], old_point: Mapping[str, Any], old_config: Mapping[str, Any]) -> dict:
    """``run`` with the scheduler requests of the run (``old_point``, ``old_config``) it differs from in nothing
    else; else ``run`` as it is."""
    same = old_point == run["point"] and configuration.run_identity(old_config) == configuration.run_identity(
        run["config"]
    )
    if not same:
        return dict(run)
    config = copy.deepcopy(run["config"])
    for key in configuration.SCHEDULER_KEYS:
        if key in old_config.get("launch", {}):
            config["launch"][key] = old_config["launch"][key]
    return {**run, "config": config}


def rewrites(run: Mapping[str, Any], path: str | Path) -> bool:
    """Whether ``run`` (sweep point and config, as planned) writes ``path`` anew: there is none, it is not a
    run file, or it holds another config. Snakemake then reruns the run's train job (which restores an attempt
    finished with that config, or trains)."""
    try:
        written = RunFile.load(path)
    except (configuration.ConfigError, OSError, KeyError, TypeError, AttributeError):  # absent, or not a run's
        return True
    # The file read once: the scheduler requests it keeps are compared from the same reading.
    kept = _with_requests_of(run, written.point, written.config)
    return (written.point, written.config) != (kept["point"], kept["config"])
