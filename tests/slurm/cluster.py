"""A real Slurm cluster of five nodes on this machine, for the tests and for trying profiles/slurm.

    tests/slurm/cluster.sh start        # munge, MariaDB, slurmdbd, slurmctld, five slurmd
    eval "$(tests/slurm/cluster.sh env)" # SLURM_CONF (and loopback settings) for this shell
    tests/slurm/cluster.sh status
    tests/slurm/cluster.sh stop         # cancels jobs, stops every daemon, removes the directory

Everything lives in one directory (``$SNAKEDDP_SLURM_DIR``, default ``/tmp/snakeddp-slurm``):
configs, keys, the database, spool, logs. Nothing is written to /etc and no systemd is needed;
daemons run in the foreground as children of no terminal, and their ids are kept in
``cluster.json`` so ``stop`` finds exactly them. The nodes ``<host>`` and ``<host>-2`` (partition
``main``, the default, two GPUs each), ``<host>-3`` (partition ``cpu``, no GPU), ``<host>-4`` (partition
``v100``: two GPUs of a model the CUDA 13 builds cannot run) and ``<host>-5`` (partition ``mig``: an A100
split into seven MIG slices) all run on this host (distinct slurmd ports, address 127.0.0.1) and share its
CPUs. Standard library only: runs with any python3.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# The first node is named after this host, as on a real cluster where the batch script (and
# so mpirun) runs on the allocation's first node and OpenMPI recognises it as its own. The
# second is a name that resolves nowhere; Slurm reaches both at 127.0.0.1.
HOST = socket.gethostname().split(".")[0]
NODES = (HOST, f"{HOST}-2")
CLUSTER_NAME = "snakeddp"
PARTITION = "main"
# A partition of one node without GRES, as a site's CPU partition beside its GPU one: what auto
# means there (cpu) is asked of Slurm like the GPU partition's.
CPU_NODE = f"{HOST}-3"
CPU_PARTITION = "cpu"
# Nodes whose GPUs a run's ranks could not use as asked, each in a partition of its own (by name): GPUs of
# a model the build has no kernels for, and MIG slices (a CUDA process enumerates one). By GRES type.
OTHER_GPUS = {f"{HOST}-4": ("v100", "v100", 2), f"{HOST}-5": ("mig", "1g.10gb", 7)}
ALL_NODES = (*NODES, CPU_NODE, *OTHER_GPUS)
# What each node declares it has, so GPU requests can be scheduled without GPUs: two GPUs of
# type GPU_TYPE and node features for --constraint. A typed GRES also satisfies an untyped
# request (gpu:2). Slurm 22.05 drops a GPU without a device file ("Removing file-less GPU
# gpu:a100 from final GRES list", slurmd with DebugFlags=Gres) and ignores one whose file is not a
# device ("not a valid character or block device"), so each fake GPU is a copy of /dev/null named
# like a GPU (nvidia0, nvidia1): Slurm allocates it and sets CUDA_VISIBLE_DEVICES from its index.
GPU_TYPE = "a100"
GPUS_PER_NODE = 2
FEATURES = ("a100", "ib")
# A QOS for --qos (it needs accounting: slurmdbd knows it, slurmctld checks it exists).
QOS = "long"
# What each node declares it has, whatever this machine has (SlurmdParameters=config_overrides): the
# docs' walkthrough (docs/slurm.md) quotes these sizes, so it reads the same on 2 cores and on 64.
# Nothing enforces them (no cgroups): the nodes share this machine's cores and memory.
NODE_CPUS = 2
NODE_MEMORY_MB = 16000
STATE_FILE = "cluster.json"
DEFAULT_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / "snakeddp-slurm"
REQUIRED = ("slurmctld", "slurmd", "slurmdbd", "sacctmgr", "munged", "mungekey", "mariadbd", "mariadb-install-db")
# The fake nodes' names do not resolve and both live on this host: keep rendezvous and MPI
# traffic on the loopback interface.
LOOPBACK_ENV = {
    "GLOO_SOCKET_IFNAME": "lo",
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}
# A database on a clean MariaDB takes ~3 s to create; slurmctld waits for slurmdbd on start.
START_TIMEOUT = 60.0


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped cleanly; the message names the daemon and its log."""


@dataclass
class Cluster:
    """Where one cluster lives and which processes belong to it."""

    directory: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.directory / "etc" / "slurm.conf"

    def path(self, *parts: str) -> Path:
        return self.directory.joinpath(*parts)

    @property
    def munge_socket(self) -> Path:
        return self.path("munge", "munge.socket")

    def env(self) -> dict[str, str]:
        """What a shell needs to use this cluster (sbatch, squeue, snakemake --profile profiles/slurm)."""
        env = {"SLURM_CONF": str(self.conf), **LOOPBACK_ENV}
        if os.getuid() == 0:
            # Jobs run as the submitting user; OpenMPI refuses root unless told otherwise.
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        return env

    def client_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        return {**base, **self.env(), "PATH": search_path()}

    def save(self) -> None:
        data = {"directory": str(self.directory), "ports": self.ports, "pids": self.pids}
        tmp = self.path(STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.path(STATE_FILE))

    @classmethod
    def load(cls, directory: Path) -> Cluster | None:
        state = directory / STATE_FILE
        if not state.is_file():
            return None
        data = json.loads(state.read_text())
        return cls(Path(data["directory"]), data["ports"], data["pids"])


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def search_path() -> str:
    """PATH with the sbin directories the daemons are installed in (not on a user's PATH)."""
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def require_root_and_binaries() -> None:
    if os.geteuid() != 0:
        raise ClusterError("the daemons (slurmd, munged) must run as root. HINT: sudo tests/slurm/cluster.sh start")
    missing = [name for name in REQUIRED if shutil.which(name, path=search_path()) is None]
    if missing:
        raise ClusterError(
            f"missing {', '.join(missing)}. HINT: install the Debian packages with tools/system-packages.sh "
            "(slurmctld, slurmd, slurmdbd, slurm-client, munge, mariadb-server)"
        )


def fake_gpus(cluster: Cluster, node: str, count: int = GPUS_PER_NODE) -> str:
    """A node's GPUs as gres.conf names them (``.../nvidia[0-1]``): null devices (major 1, minor 3)."""
    directory = cluster.path("dev", node)
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        os.mknod(directory / f"nvidia{index}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return f"{directory}/nvidia[0-{count - 1}]"


def write_configs(cluster: Cluster, db_password: str) -> None:
    d, host = cluster.directory, HOST
    ports = cluster.ports
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[name]} CPUs={NODE_CPUS} "
        f"RealMemory={NODE_MEMORY_MB} Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} Features={','.join(FEATURES)} State=UNKNOWN"
        for name in NODES
    )
    cpu_node = (
        f"NodeName={CPU_NODE} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[CPU_NODE]} CPUs={NODE_CPUS} "
        f"RealMemory={NODE_MEMORY_MB} State=UNKNOWN"
    )
    other_nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[name]} CPUs={NODE_CPUS} "
        f"RealMemory={NODE_MEMORY_MB} Gres=gpu:{kind}:{count} State=UNKNOWN"
        for name, (_, kind, count) in OTHER_GPUS.items()
    )
    other_partitions = "\n".join(
        f"PartitionName={partition} Nodes={name} MaxTime=INFINITE State=UP"
        for name, (partition, _, _) in OTHER_GPUS.items()
    )
    gres_conf = "".join(f"NodeName={name} Name=gpu Type={GPU_TYPE} File={fake_gpus(cluster, name)}\n" for name in NODES)
    gres_conf += "".join(
        f"NodeName={name} Name=gpu Type={kind} File={fake_gpus(cluster, name, count)}\n"
        for name, (_, kind, count) in OTHER_GPUS.items()
    )
    slurm_conf = f"""\
# Generated by tests/slurm/cluster.py: a five-node test cluster on one host.
ClusterName={CLUSTER_NAME}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={cluster.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
# No cgroups: processes are tracked by parentage and nothing is left under /sys/fs/cgroup.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# The nodes' declared sizes stand even where this machine has fewer cores or less memory.
SlurmdParameters=config_overrides
MpiDefault=none
GresTypes=gpu
ReturnToService=2
MailProg=/bin/true
SchedulerType=sched/backfill
# Seconds between SIGTERM and SIGKILL when a job is cancelled or hits its time limit.
KillWait=15
JobAcctGatherType=jobacct_gather/none
# Keep sbatch --comment in accounting: the Snakemake plugin writes the rule name there.
AccountingStoreFlags=job_comment
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports["slurmdbd"]}
# Without this every sacct call waits ~2 s for the default munge socket.
AccountingStoragePass={cluster.munge_socket}
# GPUs in sacct's ReqTRES/AllocTRES (by default accounting tracks CPUs, memory and nodes only).
AccountingStorageTRES=gres/gpu,gres/gpu:{GPU_TYPE}
{nodes}
{cpu_node}
{other_nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
PartitionName={CPU_PARTITION} Nodes={CPU_NODE} MaxTime=INFINITE State=UP
{other_partitions}
"""
    slurmdbd_conf = f"""\
# Generated by tests/slurm/cluster.py.
AuthType=auth/munge
AuthInfo=socket={cluster.munge_socket}
DbdHost={host}
DbdAddr=127.0.0.1
DbdPort={ports["slurmdbd"]}
SlurmUser=root
PidFile={d}/run/slurmdbd.pid
LogFile={d}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports["mariadb"]}
StorageUser=slurm
StoragePass={db_password}
StorageLoc=slurm_acct_db
"""
    cluster.conf.write_text(slurm_conf)
    cluster.path("etc", "gres.conf").write_text(gres_conf)
    dbd = cluster.path("etc", "slurmdbd.conf")
    dbd.touch(mode=0o600)
    dbd.write_text(slurmdbd_conf)


def log_path(cluster: Cluster, name: str) -> Path:
    return cluster.path("log", f"{name}.out")


def spawn(cluster: Cluster, name: str, argv: list[str]) -> None:
    """Start one daemon in the foreground, detached from this terminal, and remember its pid."""
    with log_path(cluster, name).open("ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cluster.client_env(),
            start_new_session=True,
        )
    cluster.pids[name] = proc.pid
    cluster.save()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        # A zombie child of this process counts as gone.
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_for(cluster: Cluster, name: str, check, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name in cluster.pids and not alive(cluster.pids[name]):
            break
        try:
            if check():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(0.2)
    tail = log_path(cluster, name).read_text(errors="replace")[-3000:] if log_path(cluster, name).exists() else ""
    raise ClusterError(f"{name} did not {what} (log {log_path(cluster, name)}):\n{tail}")


def run_client(cluster: Cluster, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=cluster.client_env(), capture_output=True, text=True, check=check, timeout=30)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_munge(cluster: Cluster) -> None:
    munge = cluster.path("munge")
    munge.mkdir(mode=0o755)
    keygen = ["mungekey", "--create", "--keyfile", str(munge / "munge.key")]
    subprocess.run(keygen, env=cluster.client_env(), check=True, capture_output=True)
    spawn(
        cluster,
        "munged",
        [
            "munged",
            "--foreground",
            f"--socket={cluster.munge_socket}",
            f"--key-file={munge / 'munge.key'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
    )
    wait_for(cluster, "munged", cluster.munge_socket.exists, "create its socket")


def start_mariadb(cluster: Cluster) -> str:
    """A private MariaDB on 127.0.0.1 for slurmdbd; returns the password of its 'slurm' user."""
    data, sock = cluster.path("mariadb", "data"), cluster.path("mariadb", "mariadb.sock")
    data.mkdir(parents=True)
    install = subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        env=cluster.client_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if install.returncode != 0:
        raise ClusterError(f"mariadb-install-db failed:\n{install.stdout[-2000:]}\n{install.stderr[-2000:]}")
    spawn(
        cluster,
        "mariadbd",
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={sock}",
            f"--port={cluster.ports['mariadb']}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--user=root",
            f"--pid-file={cluster.path('mariadb', 'mariadbd.pid')}",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M",
            # slurmdbd wants a long lock wait timeout when it creates its tables.
            "--innodb-lock-wait-timeout=900",
        ],
    )
    wait_for(cluster, "mariadbd", lambda: port_open(cluster.ports["mariadb"]) and sock.exists(), "accept connections")
    password = secrets.token_hex(16)
    sql = (
        f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    )
    client = ["mariadb", "--no-defaults", f"--socket={sock}", "-u", "root", "-e", sql]
    subprocess.run(client, env=cluster.client_env(), check=True)
    return password


def start(directory: Path) -> Cluster:
    """Start every daemon; on any failure stop what was started and raise ClusterError."""
    require_root_and_binaries()
    existing = Cluster.load(directory)
    if existing is not None and any(alive(pid) for pid in existing.pids.values()):
        raise ClusterError(f"a cluster is already running from {directory}. HINT: tests/slurm/cluster.sh stop")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    cluster = Cluster(directory)
    for sub in ("etc", "state", "run", "log", *(f"spool/{n}" for n in ALL_NODES)):
        cluster.path(sub).mkdir(parents=True, exist_ok=True)
    names = ("slurmctld", "slurmdbd", "mariadb", *ALL_NODES)
    cluster.ports = dict(zip(names, free_ports(len(names)), strict=True))
    cluster.save()
    try:
        start_munge(cluster)
        password = start_mariadb(cluster)
        write_configs(cluster, db_password=password)
        spawn(cluster, "slurmdbd", ["slurmdbd", "-D"])
        wait_for(cluster, "slurmdbd", lambda: port_open(cluster.ports["slurmdbd"]), "listen")
        run_client(cluster, ["sacctmgr", "--immediate", "add", "cluster", CLUSTER_NAME])
        run_client(cluster, ["sacctmgr", "--immediate", "add", "qos", QOS])
        spawn(cluster, "slurmctld", ["slurmctld", "-D"])
        wait_for(
            cluster,
            "slurmctld",
            lambda: run_client(cluster, ["scontrol", "ping"], check=False).returncode == 0,
            "answer",
        )
        for node in ALL_NODES:
            spawn(cluster, f"slurmd-{node}", ["slurmd", "-D", "-N", node])
        wait_for(cluster, "slurmctld", lambda: idle_nodes(cluster) == set(ALL_NODES), "see every node idle")
    except BaseException:
        stop(cluster, remove=False)
        raise
    return cluster


def idle_nodes(cluster: Cluster) -> set[str]:
    out = run_client(cluster, ["sinfo", "--noheader", "--Node", "--format=%N %t"], check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["idle"]}


def ancestors(pid: int) -> set[int]:
    """``pid`` and every process above it, up to init."""
    found = set()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            # The parent is the field after the command's closing parenthesis and the state.
            pid = int(Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return found


def cluster_processes(cluster: Cluster) -> list[int]:
    """Every process that runs with this cluster's SLURM_CONF: daemons, job steps, their tasks."""
    marker = f"SLURM_CONF={cluster.conf}".encode()
    # Not this process, nor what started it: the shell that exported the cluster's environment
    # (`eval "$(cluster.sh env)"`), cluster.sh itself, a timeout or sudo around it.
    spared = ancestors(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def terminate(pids: list[int], timeout: float) -> list[int]:
    """SIGTERM, then SIGKILL what is left after ``timeout``; returns the pids that had to be killed."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        for pid in pids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.1)
    killed = [p for p in pids if alive(p)]
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return killed


def stop(cluster: Cluster, remove: bool = True) -> list[str]:
    """Cancel all jobs, stop the daemons (slurmd first, munge last), and any process left behind.

    Returns a note per process that needed SIGKILL or outlived its daemon, so callers can fail on leftovers.
    """
    notes = []
    slurmctld = cluster.pids.get("slurmctld")
    if slurmctld and alive(slurmctld):
        run_client(cluster, ["scancel", "--full", f"--user={os.getuid()}"], check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            queue = run_client(cluster, ["squeue", "--noheader", "--format=%i"], check=False)
            if queue.returncode != 0 or not queue.stdout.strip():
                break
            time.sleep(0.5)
    order = [f"slurmd-{n}" for n in ALL_NODES] + ["slurmctld", "slurmdbd", "mariadbd", "munged"]
    for name in order:
        pid = cluster.pids.get(name)
        if pid and alive(pid):
            notes += [f"{name} (pid {p}) needed SIGKILL" for p in terminate([pid], timeout=20)]
    leftovers = cluster_processes(cluster)
    if leftovers:
        notes.append(f"left-over processes of this cluster stopped: {leftovers}")
        terminate(leftovers, timeout=10)
    if remove:
        shutil.rmtree(cluster.directory, ignore_errors=True)
    else:
        cluster.pids.clear()
        cluster.save()
    return notes


def status(cluster: Cluster) -> str:
    lines = [f"directory {cluster.directory}", f"SLURM_CONF={cluster.conf}"]
    for name, pid in cluster.pids.items():
        lines.append(f"{name:12} pid {pid:<8} {'running' if alive(pid) else 'STOPPED'}")
    if cluster.pids.get("slurmctld") and alive(cluster.pids["slurmctld"]):
        lines.append(run_client(cluster, ["sinfo", "--Node", "--long"], check=False).stdout.rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/slurm/cluster.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("start", "stop", "status", "env"))
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("SNAKEDDP_SLURM_DIR", DEFAULT_DIR)))
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    try:
        if args.command == "start":
            cluster = start(directory)
            print(status(cluster))
            chosen = (
                ""
                if args.dir == Path(DEFAULT_DIR) and "SNAKEDDP_SLURM_DIR" not in os.environ
                else f" --dir {shlex.quote(str(directory))}"
            )
            print(f'\nUse it from a shell: eval "$(tests/slurm/cluster.sh env{chosen})"')
            return 0
        cluster = Cluster.load(directory)
        if cluster is None:
            print(f"no cluster in {directory}", file=sys.stderr)
            return 0 if args.command == "stop" else 1
        if args.command == "stop":
            for note in stop(cluster):
                print(note, file=sys.stderr)
        elif args.command == "status":
            print(status(cluster))
        else:
            print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in cluster.env().items()))
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
