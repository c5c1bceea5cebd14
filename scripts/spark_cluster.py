"""A real standalone Spark cluster on this machine: one master and two 1-core workers on 127.0.0.1.

    .venv/bin/python scripts/spark_cluster.py start   # prints the master URL and the line to export
    .venv/bin/python scripts/spark_cluster.py stop    # stops the workers (and their executors), then the master
    .venv/bin/python scripts/spark_cluster.py start --workers 1 --cores 2 --gpus 2   # a worker offering 2 GPUs

The master and the workers are the JVM classes of the pyspark wheel (it ships no start-master
script), started with ``spark-class`` and a JDK (JAVA_HOME, else ``java`` on PATH). Everything lives
in one directory (``$SNAKEDDP_SPARK_DIR``, default ``/tmp/snakeddp-spark``): spark-defaults.conf
(``SPARK_CONF_DIR``: ``spark.master`` and, with ``--secret``, ``spark.authenticate``), the workers'
work directories (executor logs) and the daemons' logs. Process ids are kept in ``cluster.json`` so
``stop`` ends exactly these processes and the executors they started.

With ``--gpus N`` each worker offers N GPUs as Spark's standalone workers do
(``spark.worker.resource.gpu.amount`` and ``...discoveryScript``, in the worker's SPARK_WORKER_OPTS):
the script, written into the directory (mode 700), prints the addresses in Spark's ResourceInformation
JSON, as Spark's own tests' scripts do. They are stand-ins, so a GPU run's ranks get distinct
addresses in CUDA_VISIBLE_DEVICES where no GPU exists. The workers share one host, so each lists
addresses of its own (worker 2 of two with 2 GPUs each: 2 and 3), as several workers on one real
GPU host must: a worker's script that listed another's GPUs would hand one GPU to two executors.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from snakeddp.spark.session import jvm_start
from snakeddp.spark.workers import master_state

HOST = "127.0.0.1"
DEFAULT_DIR = Path(os.environ.get("SNAKEDDP_SPARK_DIR", Path(tempfile.gettempdir()) / "snakeddp-spark"))
STATE_FILE = "cluster.json"
# A master JVM answers in 3-6 s on a busy 2-core machine and each worker registers 2-5 s later.
START_TIMEOUT = 90.0
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message names the process and its log."""


@dataclass
class Cluster:
    directory: Path
    master_port: int = 0
    ui_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    secret: str | None = None
    gpus: dict[str, list[str]] = field(default_factory=dict)
    """The GPU addresses each worker offers (worker name -> addresses); empty for a CPU cluster."""

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def conf_dir(self) -> Path:
        return self.directory / "conf"

    def env(self) -> dict[str, str]:
        """What a driver needs to find this cluster: the conf directory that names its master."""
        return {"SPARK_CONF_DIR": str(self.conf_dir)}

    def save(self) -> None:
        state = {
            "master_port": self.master_port,
            "ui_port": self.ui_port,
            "pids": self.pids,
            "secret": self.secret,
            "gpus": self.gpus,
        }
        (self.directory / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> Cluster | None:
        path = directory / STATE_FILE
        if not path.is_file():
            return None
        return cls(directory=directory, **json.loads(path.read_text(encoding="utf-8")))


def spark_home() -> Path:
    import pyspark  # the wheel is Spark: its jars/ and bin/spark-class

    return Path(pyspark.__file__).parent


def java_home() -> str:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        raise ClusterError("no JDK: no JAVA_HOME, no java on PATH (Debian: apt-get install openjdk-17-jre-headless)")
    return str(Path(os.path.realpath(java)).parents[1])


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def daemon_env(cluster: Cluster) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "JAVA_HOME": java_home(),
        "SPARK_CONF_DIR": str(cluster.conf_dir),
        # Every daemon and executor binds the loopback address only: nothing of the cluster is
        # reachable from another machine.
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_HOSTNAME": HOST,
        # Small heaps: a master and a worker need ~100 MB each; the default is 1 GB apiece.
        "SPARK_DAEMON_MEMORY": "256m",
        # The daemons schedule and compute nothing: the JIT's first tier and the serial collector, as the
        # application's JVMs get (snakeddp.spark.session), start a master and two workers on half the CPU
        # (21 and 15 s -> 10 and 11 s in their first 30 s here). A collector or JIT tier exported stands.
        # Their temporary folders, and the executors' (a worker makes them where its JVM's are), in the cluster's
        # directory: in /tmp, each JVM killed left its spark-* folder there.
        "SPARK_DAEMON_JAVA_OPTS": (
            f"{jvm_start(os.environ.get('SPARK_DAEMON_JAVA_OPTS', ''))} -Djava.io.tmpdir={cluster.directory / 'tmp'}"
        ),
        "SPARK_NO_DAEMONIZE": "1",
    }


def write_conf(cluster: Cluster) -> None:
    cluster.conf_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"spark.master {cluster.master_url}", "spark.ui.enabled false", "spark.executor.memory 512m"]
    # The master's web UI, where a driver (and snakeddp, for what the workers offer) finds its JSON.
    lines.append(f"spark.master.ui.port {cluster.ui_port}")
    if cluster.secret:
        # The same secret for the daemons, the executors and every driver that reads this file
        # (mode 600): a client without it is refused by the master.
        lines += ["spark.authenticate true", f"spark.authenticate.secret {cluster.secret}"]
    conf = cluster.conf_dir / "spark-defaults.conf"
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    conf.chmod(0o600)


def gpu_options(cluster: Cluster, name: str, addresses: list[str]) -> dict[str, str]:
    """A worker's GPUs as Spark's standalone docs set them: an amount and a discovery script, worker-only
    properties in SPARK_WORKER_OPTS (the driver reads spark-defaults.conf too, and has no use for them)."""
    script = cluster.directory / f"gpus-{name}.sh"
    found = json.dumps({"name": "gpu", "addresses": addresses})
    script.write_text(
        f"#!/bin/sh\n# Stand-in GPUs of the Spark {name}: Spark's ResourceInformation JSON.\necho '{found}'\n",
        encoding="utf-8",
    )
    script.chmod(0o700)
    options = (
        f"-Dspark.worker.resource.gpu.amount={len(addresses)} -Dspark.worker.resource.gpu.discoveryScript={script}"
    )
    return {"SPARK_WORKER_OPTS": f"{os.environ.get('SPARK_WORKER_OPTS', '')} {options}".strip()}


def spawn(cluster: Cluster, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> int:
    env = {**daemon_env(cluster), **(extra_env or {})}
    if name in cluster.gpus:
        # TorchDistributor keeps a CUDA_VISIBLE_DEVICES the executor inherited instead of setting the
        # task's GPU address (distributor.py, set_gpus): the worker must not pass one on.
        env.pop("CUDA_VISIBLE_DEVICES", None)
    with open(cluster.directory / "logs" / f"{name}.log", "wb") as log:
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own process group: stop() ends the JVM and anything it forked, and a Ctrl-C meant
            # for the test run does not reach the daemons before the fixture stops them in order.
            start_new_session=True,
        )
    return process.pid


def start(
    directory: Path = DEFAULT_DIR,
    workers: int = 2,
    *,
    secret: bool = False,
    cores: int = 1,
    gpus: int = 0,
    first_gpu: int = 0,
) -> Cluster:
    """A master and ``workers`` workers of ``cores`` cores and ``gpus`` stand-in GPUs each (addresses from
    ``first_gpu`` on), started and registered; stopped again if any fails."""
    if (old := Cluster.load(directory)) is not None:
        # Said: the new one has other ports, and a secret only where --secret is given again.
        print(
            f"spark_cluster: stopping the cluster already started in {directory} ({old.master_url}"
            f"{', with a secret' if old.secret else ''}) before starting this one",
            file=sys.stderr,
            flush=True,
        )
        stop(old)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "tmp").mkdir(exist_ok=True)
    master_port, ui_port, *worker_ports = free_ports(2 + 2 * workers)
    cluster = Cluster(directory, master_port, ui_port, secret=secrets.token_hex(16) if secret else None)
    if gpus:
        cluster.gpus = {f"worker-{i + 1}": [str(first_gpu + i * gpus + k) for k in range(gpus)] for i in range(workers)}
    write_conf(cluster)
    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(master_port)]
        cluster.pids["master"] = spawn(cluster, "master", [*master, "--webui-port", str(ui_port)])
        cluster.save()
        for index in range(workers):
            port, ui = worker_ports[2 * index : 2 * index + 2]
            name, work = f"worker-{index + 1}", directory / f"worker-{index + 1}"
            argv = ["org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(port)]
            argv += ["--webui-port", str(ui), "--cores", str(cores), "--memory", "1g", "--work-dir", str(work)]
            offered = gpu_options(cluster, name, cluster.gpus[name]) if name in cluster.gpus else None
            cluster.pids[name] = spawn(cluster, name, [*argv, cluster.master_url], offered)
            cluster.save()
        wait_for_workers(cluster, workers)
    except BaseException:
        stop(cluster)
        raise
    return cluster


def wait_for_workers(cluster: Cluster, count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    alive = 0
    while time.monotonic() < deadline:
        for name, pid in cluster.pids.items():
            if not pid_alive(pid):
                log = cluster.directory / "logs" / f"{name}.log"
                raise ClusterError(f"the Spark {name} exited while starting; see {log}")
        try:
            alive = sum(w["state"] == "ALIVE" for w in master_state(HOST, cluster.ui_port)["workers"])
        except (OSError, ValueError):
            # Not up yet, or not answering with its state yet: in a fresh clone's run a master that was registering
            # its first worker, in the second it logged being elected leader, answered /json/ with its HTML page.
            alive = 0
        if alive >= count:
            return
        time.sleep(0.5)
    logs = cluster.directory / "logs"
    raise ClusterError(f"{alive} of {count} Spark workers registered in {START_TIMEOUT:.0f} s; see {logs}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead, though kill(0) still finds it until its parent waits.
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def executors(cluster: Cluster) -> list[int]:
    """Executor JVMs the workers started now (children of the workers' process groups)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            groups = int((proc / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[2])
        except (OSError, IndexError, ValueError):
            continue
        if EXECUTOR_CLASS.encode() in cmdline and groups in cluster.pids.values():
            found.append(int(proc.name))
    return sorted(found)


def stop(cluster: Cluster, grace: float = 10.0) -> list[str]:
    """Stop every process of the cluster (workers and their executors first); what outlived it."""
    groups = [pid for name, pid in sorted(cluster.pids.items(), key=lambda item: item[0] == "master")]
    for pid in groups:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(group_alive(pid) for pid in groups):
        time.sleep(0.2)
    notes = []
    for pid in groups:
        if group_alive(pid):
            notes.append(f"process group {pid} ignored SIGTERM for {grace:.0f} s; killed")
            signal_group(pid, signal.SIGKILL)
    for pid in groups:
        reap(pid)
    (cluster.directory / STATE_FILE).unlink(missing_ok=True)
    return notes


def signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores of each worker")
    parser.add_argument("--gpus", type=int, default=0, help="stand-in GPUs each worker offers (a discovery script)")
    parser.add_argument("--secret", action="store_true", help="spark.authenticate with a fresh shared secret")
    args = parser.parse_args(argv)
    if args.action == "start":
        cluster = start(args.dir, args.workers, secret=args.secret, cores=args.cores, gpus=args.gpus)
        offered = "".join(f", {name} GPUs {','.join(found)}" for name, found in cluster.gpus.items())
        print(f"spark: master {cluster.master_url} with {args.workers} workers{offered} (logs: {args.dir}/logs)")
        print(f"export SPARK_CONF_DIR={cluster.conf_dir}")
        return 0
    cluster = Cluster.load(args.dir)
    if cluster is None:
        print(f"spark: no cluster in {args.dir}")
        return 0
    for note in stop(cluster):
        print(f"spark: {note}", file=sys.stderr)
    workers = len(cluster.pids) - 1
    print(f"spark: stopped the master {cluster.master_url} and its {workers} worker{'s' * (workers != 1)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
