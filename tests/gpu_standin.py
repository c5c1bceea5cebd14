"""Stand-in NVIDIA GPUs for the tests, on machines without any: every process started through
``StandIn.command`` with ``StandIn.env`` meets a machine with made-up GPUs, a driver and a CUDA build of
torch, each where the real one lives, up to CUDA's initialisation (which fails, saying so):

- the kernel driver's files, ``/proc/driver/nvidia`` (its ``version``, a folder per GPU with its
  ``information``), bind-mounted over /proc/driver in a private mount namespace (``unshare``, as root);
  an empty /proc/driver where the machine has none (WSL2 reaches its GPU through /dev/dxg);
- the driver's NVML, ``libnvidia-ml.so.1`` (tests/gpu_standin/nvml.c, compiled once and cached by its
  source's hash) first on LD_LIBRARY_PATH, which torch's NVML count and nvidia-ml-py load by that name,
  answering for the GPUs the machine's file names (``SNAKEDDP_STANDIN_NVML``); "driver not loaded" where the
  process cannot reach the GPUs (a container without them, on a host whose /proc lists them), and first on
  GPU hosts too, so that the host's own driver never answers for the stand-in; and what else a host's NVML
  answers: NO_PERMISSION for the GPUs a device cgroup denies, a driver/library version mismatch, a slow nvmlInit;
- the machine's /dev (tests/gpu_standin/standin_machine.py): the host's entries but its NVIDIA device nodes,
  and a node per GPU the process's cgroup allows (which opens) or denies (whose open is refused), none where the
  process reaches no GPU: a real host's /dev/nvidia0 is never seen for the stand-in's;
- a CUDA build's ``torch/version.py`` bind-mounted over the installed CPU wheel's, and the CUDA runtime's
  side of ``torch._C`` (tests/gpu_standin/sitecustomize.py, first on PYTHONPATH), which answers from the
  stand-in driver as a CUDA build does: no device and torch's "driver too old" error under a driver older
  than the build, one device where MIG slices are visible.

A Snakemake run the tests wrap in ``StandIn.command`` is forked from the harness's warm server instead
(tests/forked_snakemake.py), entering the same mounts (``MachineCommand.mounts``) before Snakemake's main.

``Checks`` runs many short checks on such machines cheaply: one interpreter per torch build imports torch
once, and forks a process per check into the machine's own mount namespace, as snakeddp's supervisor forks
a node's ranks from a process that imported torch.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SITE = Path(__file__).with_name("gpu_standin")
#: What enters a stand-in machine's mount namespace (``StandIn.command``).
MACHINE = SITE / "standin_machine.py"
#: The stand-in NVML's variable: the file naming the machine's driver and GPUs (absent: no driver reached).
NVML_DEVICES = "SNAKEDDP_STANDIN_NVML"
#: Where snakeddp keeps a machine's GPU locks (snakeddp.local.gpulocks), one folder per stand-in machine.
GPU_LOCKS = "SNAKEDDP_GPU_LOCKS"
# The stand-in NVML's lines of other work on the GPUs (tests/gpu_standin/nvml.c).
USE_LINES = ("process", "memory", "mode", "utilization")
# The CUDA version each driver branch supports (nvmlSystemGetCudaDriverVersion), NVIDIA's release notes.
CUDA_OF_DRIVER = {580: 13000, 575: 12090, 570: 12080, 565: 12070, 560: 12060, 550: 12040, 535: 12020, 525: 12000}


@functools.cache
def nvml_library() -> Path:
    """The folder of the stand-in libnvidia-ml.so.1, compiled once per source (a cache keyed by nvml.c's hash,
    shared by the session's workers and later sessions: gcc runs only when the source changed)."""
    source = SITE / "nvml.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"snakeddp-gpu-standin-{os.getuid()}" / digest
    library = folder / "libnvidia-ml.so.1"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        building = folder / f".build-{os.getpid()}.so"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libnvidia-ml.so.1", "-o", str(building), str(source)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        os.replace(building, library)  # whole or not at all, whoever builds it at the same time
    return folder


def installed_torch_version_file() -> Path:
    """The version.py of the torch these tests run (the CPU wheel's), which the stand-in covers."""
    return Path(importlib.util.find_spec("torch").origin).parent / "version.py"


@dataclass(frozen=True)
class MachineCommand:
    """``StandIn.command``: called with an argv, the command that runs it on the machine (standin_machine.py
    enters the mount namespace, then execs it: a cold start). ``mounts`` (DRIVER DEV VERSION_PY TARGET, the
    script's arguments) is the same namespace for a process that enters it itself after a fork
    (tests.forked_snakemake, with standin_machine.enter_mounts)."""

    mounts: tuple[str, str, str, str]

    def __call__(self, argv: list[str]) -> list[str]:
        return [sys.executable, "-S", str(MACHINE), *self.mounts, "--", *argv]


@dataclass
class StandIn:
    root: Path
    count: int = 1
    capability: str = "8.0"
    #: torch's CUDA build ("13.0", "12.6", ...), or "cpu".
    build: str = "13.0"
    model: str = "NVIDIA A100-SXM4-40GB"
    driver: str = "580.95.05"
    #: Several models on one host: (model, capability) per GPU, in bus order (count, model, capability unused).
    models: list[tuple[str, str]] = field(default_factory=list)
    #: MIG slices on each GPU (0: MIG mode off), named as NVML names them (``... MIG 1g.5gb``).
    mig: int = 0
    #: The host kernel lists its GPUs in /proc/driver/nvidia (False: WSL2).
    proc: bool = True
    #: This process reaches the driver (False: a container without the GPUs, on a host whose /proc lists them:
    #: NVML answers "driver not loaded", and no other libnvidia-ml, the host's own included, is found first).
    reachable: bool = True
    #: The GPUs (bus order) this process's device cgroup denies (a Slurm step, docker --gpus device=N): NVML
    #: counts them and answers NO_PERMISSION for their handles, their /dev nodes refuse to open, CUDA skips them.
    denied: tuple[int, ...] = ()
    #: The GPUs (bus order) that fell off the bus: NVML answers GPU_IS_LOST for their handles.
    lost: tuple[int, ...] = ()
    #: The error nvmlInit answers (0: none; 18: "Driver/library version mismatch", after a driver upgrade without
    #: a reboot), and the seconds it takes to answer (a GPU fallen off the bus blocks it).
    nvml_init: int = 0
    nvml_slow_s: int = 0
    #: Other work on the GPUs (a shared machine, as nvidia-smi shows it), by GPU index: each compute process's
    #: (pid, GiB it holds); GiB in use by processes this one cannot see (another container's); the compute mode
    #: ("EXCLUSIVE_PROCESS", "PROHIBITED"). Change them and call ``write_use`` to change the machine's answer.
    processes: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    hidden_use: dict[int, float] = field(default_factory=dict)
    compute_mode: dict[int, str] = field(default_factory=dict)
    #: Each GPU's memory, GiB.
    memory_gb: float = 40
    #: Each GPU's utilisation (%) as NVML samples it, by GPU index (0 where not given).
    utilisation: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.gpus = self.models or [(self.model, self.capability)] * self.count
        nvidia = self.root / "driver" / "nvidia"
        (self.root / "driver").mkdir(parents=True, exist_ok=True)
        devices = [f"driver {self.driver} {CUDA_OF_DRIVER[int(self.driver.split('.')[0])]}"]
        for index, (model, capability) in enumerate(self.gpus):
            uuid = f"GPU-{index:08d}-5a1d-4c6e-9f00-standin00000"
            major, minor = capability.split(".")
            devices.append(f"gpu {uuid} {major} {minor} {index} {model}")
            devices += [f"mig MIG-{index:04d}{slot:04d}-5a1d-4c6e-9f00-standin0000 {model} MIG 1g.5gb"
                        for slot in range(self.mig)]  # fmt: skip
            if self.proc:
                folder = nvidia / "gpus" / f"0000:{index + 1:02x}:00.0"
                folder.mkdir(parents=True)
                (folder / "information").write_text(
                    f"Model: \t\t {model}\nIRQ:   \t\t {100 + index}\nGPU UUID: \t {uuid}\n"
                    f"Bus Location: \t {folder.name}\nDevice Minor: \t {index}\nGPU Excluded: \t No\n"
                )
        if self.proc:
            (nvidia / "gpus").mkdir(parents=True, exist_ok=True)
            (nvidia / "version").write_text(
                f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {self.driver}  Release Build  (dvs-builder@U16)\n"
                "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
            )
        devices += self._host_lines()
        devices += self._use_lines()
        lib = self.root / "nvml"
        lib.mkdir()
        if self.reachable:
            (lib / "devices").write_text("\n".join(devices) + "\n")
        (lib / "listed").write_text("\n".join(devices) + "\n")
        # The installed wheel's version.py with the build's CUDA (on a GPU host, a CUDA wheel's file covered alike).
        self.torch_version = self.root / "torch-version.py"
        text = installed_torch_version_file().read_text()
        label = {"13.0": "", "cpu": "+cpu"}.get(self.build, f"+cu{self.build.replace('.', '')}")
        text = re.sub(r"^__version__ = '([^'+]+)[^']*'", rf"__version__ = '\g<1>{label}'", text, flags=re.M)
        cuda = "None" if self.build == "cpu" else repr(self.build)
        self.torch_version.write_text(re.sub(r"^cuda: (.*) = .*$", rf"cuda: \g<1> = {cuda}", text, flags=re.M))

    def _host_lines(self) -> list[str]:
        """The stand-in NVML's lines for the host's answers beside its GPUs, and the machine's /dev nodes."""
        nodes = [f"nvidia{index} {'denied' if index in self.denied else 'open'}" for index in range(len(self.gpus))]
        self.nodes = self.root / "dev"
        self.nodes.write_text("\n".join(nodes if self.proc and self.reachable else []) + "\n")
        lines = [f"denied {index}" for index in self.denied] + [f"lost {index}" for index in self.lost]
        lines += [f"init {self.nvml_init}"] if self.nvml_init else []
        return lines + ([f"slow {self.nvml_slow_s}"] if self.nvml_slow_s else [])

    def _use_lines(self) -> list[str]:
        """The stand-in NVML's lines for other work on the GPUs (tests/gpu_standin/nvml.c), by UUID."""
        modes = {"EXCLUSIVE_PROCESS": 3, "PROHIBITED": 2}
        lines = []
        for index in range(len(self.gpus)):
            uuid = f"GPU-{index:08d}-5a1d-4c6e-9f00-standin00000"
            lines.append(f"memory {uuid} {int(self.memory_gb * 2**30)} {int(self.hidden_use.get(index, 0) * 2**30)}")
            lines += [f"process {uuid} {pid} {int(gib * 2**30)}" for pid, gib in self.processes.get(index, [])]
            if index in self.compute_mode:
                lines.append(f"mode {uuid} {modes[self.compute_mode[index]]}")
            if index in self.utilisation:
                lines.append(f"utilization {uuid} {self.utilisation[index]} 0")
        return lines

    def write_use(self) -> None:
        """The machine's answer changed to the present ``processes``, ``hidden_use`` and ``compute_mode``."""
        for name in ("devices", "listed"):
            path = self.root / "nvml" / name
            if path.exists():
                kept = [line for line in path.read_text().splitlines() if line.split(" ")[0] not in USE_LINES]
                path.write_text("\n".join(kept + self._use_lines()) + "\n")

    @property
    def uuids(self) -> list[str]:
        """Each GPU's UUID, in bus order (what CUDA_VISIBLE_DEVICES may name)."""
        return [line.split()[1] for line in (self.root / "nvml/listed").read_text().splitlines()[1:]
                if line.startswith("gpu ")]  # fmt: skip

    @property
    def mig_uuids(self) -> list[str]:
        return [line.split()[1] for line in (self.root / "nvml/listed").read_text().splitlines()
                if line.startswith("mig ")]  # fmt: skip

    def env(self, base: dict[str, str], visible: str | None = None) -> dict[str, str]:
        """``base`` as a process on the stand-in machine sees it: the stand-in torch first on PYTHONPATH, its
        NVML first on LD_LIBRARY_PATH naming its GPUs, CUDA_VISIBLE_DEVICES as given (None: unset)."""
        env = {k: v for k, v in base.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["PYTHONPATH"] = os.pathsep.join([str(SITE), base.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(nvml_library()), base.get("LD_LIBRARY_PATH", "")])
        env["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"].rstrip(os.pathsep)
        env[NVML_DEVICES] = str(self.root / "nvml" / "devices")
        env[GPU_LOCKS] = str(self.root / "gpu-locks")  # the machine's own /dev/shm: its GPUs' locks its own
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        return env

    @property
    def command(self) -> MachineCommand:
        """``command(argv)``: ``argv`` run where /proc/driver, /dev and torch's version.py are the stand-in's (a
        mount namespace of its own)."""
        target = installed_torch_version_file()
        return MachineCommand((str(self.root / "driver"), str(self.nodes), str(self.torch_version), str(target)))


class Checks:
    """Short checks on stand-in machines, each in a process of its own forked from one interpreter per torch
    build that imported torch once (tests/gpu_standin/forks.py): a check costs a fork, not torch's import.
    What a check may rely on is what a fresh process on that machine has: its own mount namespace (the
    machine's /proc/driver), its whole environment, nothing of NVML's or CUDA's state. Close it when done."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.workers: dict[str, subprocess.Popen] = {}
        self.count = 0

    def worker(self, standin: StandIn, env: dict[str, str]) -> subprocess.Popen:
        if standin.build not in self.workers:
            argv = standin.command([sys.executable, str(SITE / "forks.py")])
            self.workers[standin.build] = subprocess.Popen(
                argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        return self.workers[standin.build]

    def run(self, standin: StandIn, env: dict[str, str], code: str, *args: str) -> subprocess.CompletedProcess:
        """``python -c code args`` on ``standin``'s machine with ``env`` (as ``standin.env`` makes it)."""
        self.count += 1
        out, err = self.folder / f"check-{self.count}.out", self.folder / f"check-{self.count}.err"
        worker = self.worker(standin, env)
        request = {"driver": str(standin.root / "driver"), "nodes": str(standin.nodes), "env": env, "code": code,
                   "args": list(args), "out": str(out), "err": str(err)}  # fmt: skip
        worker.stdin.write(json.dumps(request) + "\n")
        worker.stdin.flush()
        answer = worker.stdout.readline()
        if not answer:
            raise RuntimeError(f"the stand-in's {standin.build} worker ended (exit status {worker.wait()})")
        returncode = json.loads(answer)["returncode"]
        argv = [sys.executable, "-c", code, *args]
        return subprocess.CompletedProcess(argv, returncode, out.read_text(), err.read_text())

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stdin.close()
            worker.wait(timeout=60)
            worker.stdout.close()
        self.workers.clear()


def main(argv: list[str]) -> int:
    """``python -m tests.gpu_standin [--driver V] [--count N] [--build B] [--unreachable] -- COMMAND...``: COMMAND
    on a stand-in machine (A100s, the CUDA 13.0 build), as tools/gpu-check.sh --standin runs its steps; the
    test suite runs under it to show it passes with a CUDA build of torch on a GPU host (docs/development.md),
    ``--unreachable`` where the GPUs are the host's and its processes reach none (a container without them)."""
    import argparse
    import sys
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m tests.gpu_standin")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--driver", default="580.95.05")
    parser.add_argument("--build", default="13.0", help="torch's CUDA build (13.0, 13.2, 12.6) or cpu")
    parser.add_argument("--unreachable", action="store_true", help="the host lists its GPUs; no process reaches them")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpu-standin-") as root:
        shape = {"count": args.count, "driver": args.driver, "build": args.build, "reachable": not args.unreachable}
        standin = StandIn(Path(root) / "machine", **shape)
        env = standin.env({k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"})
        sys.stdout.flush()
        return subprocess.run(standin.command(args.command), env=env, check=False).returncode


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
