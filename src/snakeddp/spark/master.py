"""Which Spark master a run's driver connects to, and what it needs there, checked without pyspark.

The master is named where Spark users already name it: ``spark.master`` in
``$SPARK_CONF_DIR/spark-defaults.conf`` (else ``$SPARK_HOME/conf``), or the ``MASTER`` variable;
the config's ``spark.master`` overrides both. Every check ends as one line with a HINT, made
before any job runs (``snakeddp.workflow.preflight``) and again by the driver, where it runs.
Standard library only: the Snakefile imports this module.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from snakeddp.spark import SparkError

if TYPE_CHECKING:  # the part needs the config's packages; this module needs only the standard library
    from snakeddp.spark.settings import Settings

DEFAULTS_FILE = "spark-defaults.conf"
PROPERTY = re.compile(r"(?P<key>[^\s=:]+)\s*[=:\s]\s*(?P<value>.*)")
# A master that does not accept a connection in this long is down or unreachable from here.
CONNECT_TIMEOUT_S = 3.0
# As typed from the checkout root: the venv has pyspark and snakeddp (a bare python has neither).
TRY_LOCALLY = ".venv/bin/python scripts/spark_cluster.py start"
ADD_PYSPARK = "run `tools/add.sh pyspark --stage train`"


def defaults_file(env: Mapping[str, str]) -> Path | None:
    """spark-defaults.conf where spark-submit reads it: $SPARK_CONF_DIR, else $SPARK_HOME/conf."""
    if env.get("SPARK_CONF_DIR"):
        return Path(env["SPARK_CONF_DIR"]) / DEFAULTS_FILE
    if env.get("SPARK_HOME"):
        return Path(env["SPARK_HOME"]) / "conf" / DEFAULTS_FILE
    return None


def read_defaults(path: Path) -> dict[str, str]:
    """spark-defaults.conf's settings: Java properties, ``key value`` (or ``=``, ``:``), '#' comments."""
    pairs = (PROPERTY.match(line.strip()) for line in path.read_text(encoding="utf-8").splitlines())
    return {m["key"]: m["value"].strip() for m in pairs if m and not m["key"].startswith(("#", "!"))}


def cluster_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The cluster's spark-defaults.conf settings, which Spark reads itself ({} where there is none)."""
    path = defaults_file(env)
    return read_defaults(path) if path is not None and path.is_file() else {}


def resolve(configured: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """The master URL and where it was named."""
    if configured:
        return configured, "the config's spark.master"
    if env.get("MASTER"):
        return env["MASTER"], "$MASTER"
    path = defaults_file(env)
    if path is not None and path.is_file():
        master = read_defaults(path).get("spark.master")
        if master:
            return master, str(path)
    where = f"{path} names none" if path is not None else "neither SPARK_CONF_DIR nor SPARK_HOME is set"
    raise SparkError(
        f"the spark profile found no Spark master: no spark.master in the config, no $MASTER, and {where}. "
        f"HINT: export SPARK_CONF_DIR=<dir with spark-defaults.conf naming spark.master>, or MASTER=spark://host:7077, "
        f"or set --config 'spark={{master: spark://host:7077}}' (a cluster on this machine: {TRY_LOCALLY})."
    )


def standalone_addresses(master: str) -> list[tuple[str, int]]:
    """host:port of each master of a spark:// URL (several for a standby set); [] for other masters."""
    if not master.startswith("spark://"):
        return []
    addresses = []
    for part in master.removeprefix("spark://").split(","):
        host, _, port = part.rpartition(":")
        addresses.append((host or part, int(port) if port.isdigit() else 7077))
    return addresses


def check_reachable(master: str, source: str) -> None:
    """A spark:// master answers on its port (local[...] and local-cluster[...] start their own;
    other schemes, a Databricks cluster's included, are left to Spark)."""
    addresses = standalone_addresses(master)
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
            return
        except OSError:
            continue
    if addresses:
        raise SparkError(
            f"no Spark master answers at {master} (named by {source}). HINT: start the master and its workers "
            f"(on this machine: {TRY_LOCALLY}, then export the SPARK_CONF_DIR it prints), or name a running one "
            "in spark.master."
        )


def java(env: Mapping[str, str]) -> str:
    """The java binary the driver's JVM starts with: $JAVA_HOME/bin/java, else java on PATH."""
    if env.get("JAVA_HOME"):
        candidate = Path(env["JAVA_HOME"]) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
        raise SparkError(
            f"JAVA_HOME={env['JAVA_HOME']} has no bin/java, so the Spark driver cannot start its JVM. "
            "HINT: point JAVA_HOME at a JDK 17 or 21 (Debian: /usr/lib/jvm/java-17-openjdk-amd64), or unset it."
        )
    found = shutil.which("java", path=env.get("PATH"))
    if found is None:
        raise SparkError(
            "no Java found (no JAVA_HOME, no java on PATH), so the Spark driver cannot start its JVM. "
            "HINT: install a JDK (sudo apt-get install openjdk-17-jre-headless; tools/system-packages.sh does), "
            "or set JAVA_HOME."
        )
    return found


def require_pyspark() -> None:
    if importlib.util.find_spec("pyspark") is None:
        raise SparkError(
            "the spark platform's driver needs pyspark (TorchDistributor), and it is not installed. "
            f"HINT: {ADD_PYSPARK}."
        )


def check(settings: Settings, env: Mapping[str, str]) -> tuple[str, str]:
    """Everything the driver needs before it starts: pyspark, a JDK, a master that answers."""
    require_pyspark()
    java(env)
    master, source = resolve(settings.master, env)
    check_reachable(master, source)
    return master, source
