"""What a Spark cluster's workers offer, asked of its master before any job: ``launch.accelerator: auto``
on the spark platform means gpu where the workers that are alive offer GPUs, cpu where none does.

A standalone master says what each worker has on its web UI as JSON (``/json/``: every worker's state and
``resources``, {"gpu": {"name": "gpu", "addresses": [...]}} for a worker started with
``spark.worker.resource.gpu.amount`` and a discovery script, as Spark's GPU scheduling has it). The UI's
port is where the master reads it: ``spark.master.ui.port`` (the config's spark.conf, else
spark-defaults.conf), else ``SPARK_MASTER_WEBUI_PORT`` (conf/spark-env.sh), else Spark's 8080. local[N]
runs its tasks in the driver, on this machine: its GPUs as a process here sees them. Other masters (YARN,
Kubernetes) say nothing before an application asks: there the profile declares it (site.accelerator).
Standard library only: the Snakefile imports this module.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from snakeddp.spark import master as masters
from snakeddp.spark.settings import Settings
from snakeddp.util import gpus

UI_PORT = "spark.master.ui.port"
UI_PORT_VARIABLE = "SPARK_MASTER_WEBUI_PORT"
DEFAULT_UI_PORT = 8080
ASK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Offer:
    """What the cluster's workers offer a run, as one decision: gpu or cpu, and why in words."""

    accelerator: str
    why: str


def ui_port(settings: Settings, env: Mapping[str, str]) -> int:
    """The standalone master's web UI port, where the master itself takes it from."""
    given = settings.conf.get(UI_PORT) or masters.cluster_defaults(env).get(UI_PORT)
    given = given or env.get(UI_PORT_VARIABLE)
    return int(given) if given else DEFAULT_UI_PORT


def master_state(host: str, port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{host}:{port}/json/", timeout=ASK_TIMEOUT_S) as answer:
        return json.load(answer)


def offer_of(state: Mapping[str, Any], where: str) -> Offer:
    """gpu where a worker that is alive offers GPUs (its ``resources``), cpu where none does."""
    alive = [worker for worker in state.get("workers", []) if worker.get("state") == "ALIVE"]
    offered = [len(worker.get("resources", {}).get("gpu", {}).get("addresses", [])) for worker in alive]
    with_gpus = sum(1 for count in offered if count)
    if with_gpus:
        workers = f"{with_gpus} worker{'s' if with_gpus > 1 else ''}"
        return Offer("gpu", f"{where}: {workers} alive offering {sum(offered)} GPUs")
    return Offer("cpu", f"{where}: {len(alive)} worker{'s' if len(alive) != 1 else ''} alive, none offering GPUs")


def offer(settings: Settings, env: Mapping[str, str] = os.environ) -> Offer | None:
    """What the workers of the cluster the runs would train on offer; None where the master cannot say."""
    master, _ = masters.resolve(settings.master, env)
    if master == "local" or master.startswith("local["):
        shown = gpus.visible(env)
        kind = "gpu" if shown else "cpu"
        return Offer(kind, f"{master} runs its tasks on this machine, which shows {gpus.describe(env)}")
    for host, port in web_uis(master, settings, env):
        try:
            return offer_of(master_state(host, port), f"the master at {host}:{port} says")
        except (OSError, ValueError, urllib.error.URLError):
            continue  # a standby master, or its UI elsewhere: the next, else nothing to say
    return None


def web_uis(master: str, settings: Settings, env: Mapping[str, str] = os.environ) -> list[tuple[str, int]]:
    """The web UIs ``offer`` asks a standalone ``master`` (each of a standby set's) for its workers; [] for a master
    it does not ask (local, YARN, Kubernetes)."""
    port = ui_port(settings, env)
    return [(host, port) for host, _ in masters.standalone_addresses(master)]
