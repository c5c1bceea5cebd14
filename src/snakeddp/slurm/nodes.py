"""What the nodes of the training partition have, asked of Slurm once per invocation.

``launch.accelerator: auto`` on Slurm means what the partition a run is sent to has: GPU GRES on
its nodes make it gpu, none cpu (``settle_site``); a declared ``site.accelerator`` wins. The answer
goes into the ``site`` section the workflow exports, so the ranks resolve auto as the workflow did.
Each run to train is then checked against the nodes (``check``): a request no node of the partition
can hold (GPUs, CPUs or memory per node, node count) would pend for ever, so it is refused before
anything is submitted, naming the largest node and the sizes to lower. What the ranks could not run on
is refused the same way, since every rank would stop on it after the queue: GPUs whose model (the GRES
type: ``v100``, ``a100``) the torch build the ranks run has no kernels for, and more ranks per node
than MIG slices serve (``gpu:1g.10gb:7`` is seven slices, and a CUDA process enumerates one of them:
NVIDIA's MIG user guide, so a node holds one rank of a job there). Drained and down nodes have nothing
to offer, GPUs included.

The partition is the train rule's ``slurm_partition`` resource (the profile's set-resources or
default-resources), else the one Slurm marks as default, as snakemake-executor-plugin-slurm picks it.
Two ``scontrol`` calls answer everything; they are made only when something needs the answer.
Asked while the Snakefile is read (the slurm contract): no torch.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from snakeddp.config import ConfigError
from snakeddp.config import site as site_config
from snakeddp.config.parts import Launch, Site, Trainer
from snakeddp.environment.cuda import install_hint
from snakeddp.errors import print_line
from snakeddp.run import variables
from snakeddp.util import cudabuild

#: Node state flags under which Slurm starts nothing there until an admin (or the node) acts.
UNUSABLE_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "INVAL"})
#: Flags of a node on its way back (a reboot, a cloud node powering up): it will hold jobs again.
RETURNING_STATES = frozenset({"REBOOT_ISSUED", "REBOOT_REQUESTED", "POWERING_UP", "POWER_UP"})
# scontrol's one-line records: Key=value pairs, a value running to the next " Key=" (node OS and
# Reason values hold spaces; keys hold / and :, as CPUs/Task).
FIELD = re.compile(r"([A-Za-z][\w/:]*)=(.*?)(?= [A-Za-z][\w/:]*=|$)")
QUERY_TIMEOUT_S = 30
# A MIG slice's GRES type: its profile (1g.10gb, 3g.40gb, 1g.10gb+me), alone or after the GPU's model as
# gres.conf's AutoDetect=nvml names it (nvidia_a100_3g.40gb).
MIG_PROFILE = re.compile(r"(?:^|_)\d+g\.\d+gb(?:\+\w+)?$")


class SlurmNodesError(ConfigError):
    """Slurm's partitions cannot settle or hold the runs; the message says which and what to change."""


def records(text: str) -> list[dict[str, str]]:
    """``scontrol --oneliner show ...`` output as one dict per line."""
    # Fields are separated by one space, some by two: a value keeps no trailing blank.
    return [
        {key: value.strip() for key, value in FIELD.findall(line.strip())} for line in text.splitlines() if "=" in line
    ]


def gpus(gres: str) -> dict[str | None, int]:
    """GPUs by type in a node's Gres (``gpu:a100:2(S:0-1),gpu:1,shard:8``; ``(null)``); None: untyped."""
    found: dict[str | None, int] = {}
    # Commas inside a socket list, gpu:2(S:0,1), separate no GRES.
    for item in re.split(r",(?![^(]*\))", gres):
        parts = [part for part in re.sub(r"\(.*?\)", "", item).strip().split(":") if part != "no_consume"]
        if len(parts) < 2 or parts[0] != "gpu" or not parts[-1].isdigit():
            continue
        kind = parts[1] if len(parts) > 2 else None
        found[kind] = found.get(kind, 0) + int(parts[-1])
    return found


def is_mig(gpu_type: str | None) -> bool:
    """Whether a GRES type names MIG slices rather than whole GPUs."""
    return bool(gpu_type and MIG_PROFILE.search(gpu_type))


def runnable(gpu_type: str | None, build: str | None) -> bool:
    """Whether ranks of torch's CUDA ``build`` can run on GPUs of this GRES type: True where either is
    unknown (an untyped GPU, a model the table lacks, no CUDA build named)."""
    capability = cudabuild.model_capability(gpu_type) if gpu_type and build else None
    return capability is None or cudabuild.has_kernels(build, capability)


def count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _limit(value: str | None) -> int | None:
    """A partition limit (MaxNodes=UNLIMITED, MaxMemPerNode=64000); None when unlimited."""
    return int(value) if value and value.isdigit() else None


def megabytes(value: str) -> int:
    """scontrol/squeue memory (``32000M``, ``2G``, ``32000``) in MB."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", value.strip())
    if not match:
        return 0
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "": 1}[match.group(2)]
    return int(int(match.group(1)) * scale)


@dataclass(frozen=True)
class Node:
    """One node as slurmctld describes it."""

    name: str
    cpus: int
    #: Memory jobs may use: RealMemory less what MemSpecLimit keeps for the system.
    memory_mb: int
    #: GPUs by type (None: untyped), from the node's Gres.
    gpus: Mapping[str | None, int]
    state: str
    partitions: tuple[str, ...]

    @classmethod
    def from_record(cls, record: Mapping[str, str]) -> Node:
        cpus = record.get("CPUEfctv") or record.get("CPUTot") or "0"
        memory = int(record.get("RealMemory", "0") or 0) - int(record.get("MemSpecLimit", "0") or 0)
        partitions = tuple(filter(None, record.get("Partitions", "").split(",")))
        return cls(
            record["NodeName"], int(cpus), memory, gpus(record.get("Gres", "")), record.get("State", ""), partitions
        )

    @property
    def usable(self) -> bool:
        """Whether Slurm may start a job here without anyone acting: not down, drained or failed."""
        flags = set(self.state.rstrip("*~#!%$@^-").split("+"))
        return not flags & UNUSABLE_STATES or bool(flags & RETURNING_STATES)

    def gpu_count(self, gpu_type: str | None) -> int:
        return sum(self.gpus.values()) if gpu_type is None else self.gpus.get(gpu_type, 0)

    def kinds(self, gpu_type: str | None) -> dict[str | None, int]:
        """The node's GPUs a request for ``gpu_type`` (None: any) may be given, by type."""
        return {kind: n for kind, n in self.gpus.items() if gpu_type is None or kind == gpu_type}

    def gpu_ranks(self, gpu_type: str | None, build: str | None) -> int:
        """How many ranks of one job can each have a GPU here that torch's ``build`` runs on: the whole GPUs
        of the type asked for, and one for MIG slices (a CUDA process enumerates one slice)."""
        usable = {kind: n for kind, n in self.kinds(gpu_type).items() if runnable(kind, build)}
        whole = sum(n for kind, n in usable.items() if not is_mig(kind))
        return max(whole, 1 if any(n for kind, n in usable.items() if is_mig(kind)) else 0)

    def describe(self, capacity: tuple[int, int], gpu_type: str | None) -> str:
        """``2 GPUs (a100), 2 CPUs, 23081 MB``: its GPUs (of ``gpu_type``), and the CPUs and memory one
        job may have (``capacity``, Partition.capacity)."""
        if gpu_type:
            shown = count(self.gpu_count(gpu_type), f"{gpu_type} GPU")
        else:
            kinds = ", ".join(sorted(kind for kind in self.gpus if kind))
            shown = count(self.gpu_count(None), "GPU") + (f" ({kinds})" if kinds else "")
        return f"{shown}, {count(capacity[0], 'CPU')}, {capacity[1]} MB"


@dataclass(frozen=True)
class Partition:
    """A partition, its nodes and the limits that cap what one job may ask of them."""

    name: str
    default: bool
    nodes: tuple[Node, ...]
    max_nodes: int | None = None
    max_cpus_per_node: int | None = None
    max_mem_per_node: int | None = None
    #: MaxTime as scontrol prints it (``1-00:00:00``, ``UNLIMITED``).
    max_time: str | None = None

    @property
    def up(self) -> tuple[Node, ...]:
        """The nodes Slurm may start a job on now or soon (not drained, down or failed)."""
        return tuple(node for node in self.nodes if node.usable)

    @property
    def has_gpus(self) -> bool:
        """Whether a node that is up has GPUs: a drained GPU node trains nothing."""
        return any(node.gpus for node in self.up)

    def capacity(self, node: Node) -> tuple[int, int]:
        """CPUs and MB one job may have on ``node`` here (MaxCPUsPerNode, MaxMemPerNode)."""
        cpus = min(node.cpus, self.max_cpus_per_node or node.cpus)
        return cpus, min(node.memory_mb, self.max_mem_per_node or node.memory_mb)

    def holds(self, node: Node, need: Need) -> bool:
        cpus, memory = self.capacity(node)
        gpus = node.gpu_ranks(need.gpu_type, need.build) if need.gpus else 0
        return cpus >= need.cpus and memory >= need.mem_mb and gpus >= need.gpus

    def hosts(self, need: Need) -> list[Node]:
        """The nodes that are up and could each hold one node's share of ``need``."""
        return [node for node in self.nodes if node.usable and self.holds(node, need)]

    def largest(self, gpu_type: str | None, build: str | None = None) -> Node | None:
        """The node that is up with the most GPUs (of ``gpu_type``, for ranks of ``build``), then CPUs, then
        memory."""
        return max(self.up, key=lambda n: (n.gpu_ranks(gpu_type, build), *self.capacity(n)), default=None)

    def gpu_kinds(self, gpu_type: str | None) -> dict[str | None, int]:
        """The GPU types (of ``gpu_type``) on the nodes that are up, with the most one node has of each."""
        found: dict[str | None, int] = {}
        for node in self.up:
            for kind, n in node.kinds(gpu_type).items():
                found[kind] = max(found.get(kind, 0), n)
        return found


@dataclass(frozen=True)
class Need:
    """What one Slurm job asks of each of its nodes, and of how many."""

    nodes: int
    cpus: int
    mem_mb: int
    gpus: int = 0
    gpu_type: str | None = None
    #: The CUDA build of torch the ranks run ("13.0"), which GPUs of some models cannot run; None: unknown.
    build: str | None = None
    #: trainer.precision, which GPUs without native bfloat16 refuse as bf16-mixed.
    precision: str = "32-true"

    def describe(self) -> str:
        """``1 GPU, 4 CPUs and 16000 MB`` (no GPUs named for a CPU run)."""
        gpus = f"{count(self.gpus, f'{self.gpu_type} GPU' if self.gpu_type else 'GPU')}, " if self.gpus else ""
        return f"{gpus}{count(self.cpus, 'CPU')} and {self.mem_mb} MB"


def need(
    launch: Launch,
    accelerator: str,
    site: Site,
    build: str | None = None,
    precision: str = "32-true",
) -> Need:
    """A run's train job per node, as snakeddp.slurm.resources asks for it: one task per rank (or
    one torchrun task with all of the node's ranks' CPUs), --mem per node, --gres=gpu per node; ``build``:
    the CUDA build of torch its ranks run, ``precision`` its trainer.precision."""
    devices = launch.devices
    gpu = accelerator == "gpu"
    return Need(
        nodes=launch.nodes,
        cpus=devices * site_config.cpus_per_process(launch, accelerator, site),
        mem_mb=site_config.mem_mb(launch, accelerator, site),
        gpus=devices if gpu else 0,
        gpu_type=site.gpu_type if gpu else None,
        build=build if gpu else None,
        precision=precision,
    )


def resource_text(raw: Any) -> str | None:
    """A profile's resource value as Snakemake reads it: a Python literal, else the text itself
    (``"'gpu'"`` and ``gpu`` are both gpu)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return str(raw)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
    return None if value is None else str(value)


def partition_of(resource_settings: Any, rule: str) -> str | None:
    """The ``slurm_partition`` a rule's jobs get from the profile or command line (set-resources
    over default-resources), or None: then the plugin takes Slurm's default partition."""
    for resources in ((resource_settings.overwrite_resources or {}).get(rule), resource_settings.default_resources):
        # Membership, not .get(): Snakemake's Resources answer a missing name with an empty Resource.
        if resources and "slurm_partition" in resources:
            found = resources["slurm_partition"]
            return resource_text(getattr(found, "raw", found))
    return None


def scontrol(*argv: str) -> str:
    """One scontrol query (all partitions and nodes, hidden ones too), or SlurmNodesError naming why not."""
    command = ["scontrol", "--all", "--oneliner", *argv]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmNodesError(f"{' '.join(command)}: {error}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmNodesError(f"{' '.join(command)}: {lines[-1] if lines else f'exit status {done.returncode}'}")
    return done.stdout


def ask(run: Callable[..., str] = scontrol) -> dict[str, Partition]:
    """Every partition Slurm knows, with its nodes."""
    nodes = [Node.from_record(record) for record in records(run("show", "node")) if "NodeName" in record]
    partitions = {}
    for record in records(run("show", "partition")):
        name = record.get("PartitionName")
        if not name:
            continue
        partitions[name] = Partition(
            name,
            default=record.get("Default") == "YES",
            nodes=tuple(node for node in nodes if name in node.partitions),
            max_nodes=_limit(record.get("MaxNodes")),
            max_cpus_per_node=_limit(record.get("MaxCPUsPerNode")),
            max_mem_per_node=_limit(record.get("MaxMemPerNode")),
            max_time=record.get("MaxTime"),
        )
    return partitions


class TrainingNodes:
    """The partitions an invocation's training jobs go to (``rules``: train, and search_train in a
    search), asked of Slurm on first use and at most once."""

    def __init__(self, resource_settings: Any, rules: Iterable[str], run: Callable[..., str] = scontrol) -> None:
        self.named = {rule: partition_of(resource_settings, rule) for rule in rules}
        self._run = run

    @cached_property
    def groups(self) -> dict[str, tuple[Partition, ...]]:
        """Each training rule's partitions (``sbatch -p a,b``: its jobs start in whichever can start
        them first); SlurmNodesError when Slurm does not answer or lacks one."""
        known = ask(self._run)
        found = {}
        for rule, name in self.named.items():
            if name is None:
                default = next((p for p in known.values() if p.default), None)
                if default is None:
                    raise SlurmNodesError(
                        f"rule {rule} names no Slurm partition and Slurm marks none as default (sinfo shows no *). "
                        "HINT: set one in the profile: set-resources: train: slurm_partition: \"'<partition>'\"."
                    )
                found[rule] = (default,)
                continue
            for part in name.split(","):
                if part not in known:
                    raise SlurmNodesError(
                        f"rule {rule} goes to Slurm partition {part!r} (slurm_partition), which Slurm does not know "
                        f"(it has {', '.join(sorted(known)) or 'none'}). HINT: set slurm_partition in the profile's "
                        "set-resources (or default-resources) to a partition `sinfo -s` lists."
                    )
            found[rule] = tuple(known[part] for part in name.split(","))
        return found

    def accelerator(self) -> str:
        """gpu when the nodes that are up in the partitions a training job may go to have GPU GRES, cpu when
        none has (each rule's partitions: a job of ``-p gpu,cpu`` starts where its GPUs are)."""
        return self.decision()[0]

    def decision(self) -> tuple[str, str]:
        """``accelerator()`` and why, in words: what each partition's nodes that are up have."""
        kinds = {rule: "gpu" if any(p.has_gpus for p in group) else "cpu" for rule, group in self.groups.items()}
        if len(set(kinds.values())) > 1:
            which = ", ".join(
                f"{rule} to {','.join(p.name for p in self.groups[rule])} ({kind})"
                for rule, kind in sorted(kinds.items())
            )
            raise SlurmNodesError(
                f"launch.accelerator is auto, and the training partitions differ in what their nodes have: {which}. "
                'HINT: declare it in the profile\'s config: entries ("site={accelerator: gpu}", or cpu), or send '
                "train and search_train to the same partition (set-resources: slurm_partition)."
            )
        partitions = {partition.name: partition for group in self.groups.values() for partition in group}
        return (kinds.popitem()[1] if kinds else "cpu"), "; ".join(map(offers, partitions.values()))


def offers(partition: Partition) -> str:
    """What a partition's nodes offer a job now: ``partition main: 2 nodes up with GPUs (a100), 1 drained``."""
    up, down = partition.up, len(partition.nodes) - len(partition.up)
    kinds = sorted({kind for node in up for kind in node.gpus if kind})
    with_gpus = sum(bool(node.gpus) for node in up)
    models = f" ({', '.join(kinds)})" if kinds else ""
    has = f"{count(with_gpus, 'node')} up with GPUs{models}" if with_gpus else ""
    plain = len(up) - with_gpus
    parts = [part for part in (has, f"{count(plain, 'node')} up without" if plain else "") if part]
    parts.append(f"{down} down or drained" if down else "")
    return f"partition {partition.name}: {', '.join(filter(None, parts)) or 'no nodes'}"


def settle_site(
    site: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    nodes: TrainingNodes | None,
    env: Mapping[str, str],
    say: Callable[[str], None] = print_line,
) -> dict[str, Any]:
    """``site`` with its accelerator filled in from Slurm when a run's auto needs it and nothing is
    declared, saying so in one line (``say``). ``nodes`` is None inside a job: the site its invocation
    exported (``env``) holds the decision, so a job never asks Slurm again nor decides otherwise than the
    invocation did."""
    settled = variables.settled_site(site, runs, env, deciding=nodes is not None)
    if settled is not None or nodes is None:  # in a job (no nodes) the site is always settled
        return settled or dict(site)
    waiting = [rid for rid, run in runs.items() if run["config"]["launch"]["accelerator"] == "auto"]
    try:
        decided, why = nodes.decision()
    except SlurmNodesError as error:
        if "HINT:" in str(error):
            raise
        raise SlurmNodesError(
            f"run {waiting[0]}: launch.accelerator is auto, the slurm profile does not say what its nodes have "
            f"(site.accelerator), and Slurm did not say either ({error}). HINT: run snakemake where Slurm answers "
            "(a login node, where `sinfo` works), or declare it in the profile's config: entries "
            '("site={accelerator: gpu}", or cpu), or set launch.accelerator: gpu (or cpu).'
        ) from None
    say(f"snakeddp: launch.accelerator auto on Slurm means {decided} ({why}).")
    return {**site, "accelerator": decided}


def _flow(mapping: Mapping[str, Any]) -> str:
    """A mapping as --config takes it: ``{cpus_per_gpu: 1, gpu_type: null}``."""
    items = ", ".join(f"{key}: {'null' if value is None else value}" for key, value in mapping.items())
    return f"{{{items}}}"


def _smaller_sites(runs: list[tuple[Launch, str]], site: Site, cpus: int, memory: int, gpus: int) -> dict[str, int]:
    """The per-GPU sizes (site.cpus_per_gpu, site.mem_mb_per_gpu) at which the ranks of every GPU run
    (launch, accelerator) fit on a node with ``cpus``, ``memory`` and ``gpus``, where the site's sizes
    are what keeps some run off it."""
    smaller: dict[str, int] = {}
    for launch, accelerator in runs:
        # A run with more ranks per node than fit is sized as it will be once launch.devices is lowered.
        devices = min(launch.devices, gpus, cpus)
        if accelerator != "gpu" or devices < 1:
            continue
        per_rank_cpus, per_rank_mb = cpus // devices, memory // devices
        if site.cpus_per_gpu > per_rank_cpus >= launch.threads_per_process:
            smaller["cpus_per_gpu"] = min(smaller.get("cpus_per_gpu", per_rank_cpus), per_rank_cpus)
        if launch.mem_mb is None and devices * site.mem_mb_per_gpu > memory:
            smaller["mem_mb_per_gpu"] = min(smaller.get("mem_mb_per_gpu", per_rank_mb), per_rank_mb)
    return smaller


def _fixes(launch: Launch, wanted: Need, cpus: int, memory: int, gpus: int) -> list[str]:
    """What to set in a run's launch: section so that one node's share fits where the site's
    per-GPU sizes are not the problem."""
    devices = launch.devices
    fixes = []
    if wanted.gpus and devices > gpus:
        fixes.append(f"launch.devices to at most {gpus} (more launch.nodes instead)")
    elif devices > cpus:
        fixes.append(f"launch.devices to at most {cpus} (more launch.nodes instead)")
    elif launch.threads_per_process > cpus // devices:
        fixes.append(f"launch.threads_per_process to at most {cpus // devices}")
    if launch.mem_mb is not None and launch.mem_mb > memory:
        fixes.append(f"launch.mem_mb to at most {memory}")
    elif launch.mem_mb is None and not wanted.gpus and wanted.mem_mb > memory:
        fixes.append(f"launch.mem_mb to at most {memory}")
    return [f"set {fix}" for fix in fixes]


OTHER_PARTITION = "or train on a partition with larger nodes (set-resources: train: slurm_partition in the profile)"
OTHER_GPUS = "or train on a partition of other GPUs (set-resources: train: slurm_partition in the profile)"


def refusal(
    run_id: str,
    launch: Launch,
    wanted: Need,
    partition: Partition,
    runs: list[tuple[Launch, str]],
    site: Site,
    declared: Mapping[str, Any],
) -> SlurmNodesError | None:
    """Why no job of ``run_id`` asking for ``wanted`` could start in ``partition`` (None: one can),
    with what to lower: ``runs`` (every run's launch and accelerator) so that the per-GPU sizes
    suggested fit them all, ``declared`` (the site as given) so that the suggested --config keeps it."""
    hosts = partition.hosts(wanted)
    limit = partition.max_nodes
    if len(hosts) >= wanted.nodes and (limit is None or wanted.nodes <= limit):
        return without_bf16(run_id, wanted, partition.name, hosts)
    where = f"Slurm partition {partition.name}"
    largest = partition.largest(wanted.gpu_type, wanted.build)
    down = sum(not node.usable for node in partition.nodes)
    if largest is None:
        return SlurmNodesError(
            f"run {run_id}: every node of {where} is down or drained ({down} of {len(partition.nodes)}), so its "
            f"job would wait until someone brings one back. HINT: run again when `sinfo -p {partition.name}` shows "
            "nodes idle or mixed, or train on another partition (set-resources: train: slurm_partition in the profile)."
        )
    each = "1 node" if wanted.nodes == 1 else f"each of {wanted.nodes} nodes"
    asked = f"run {run_id}: its job asks {each} for {wanted.describe()}"
    if hosts:
        most = min(len(hosts), limit or len(hosts))
        capped = f" and lets one job have {limit}" if limit is not None and limit < wanted.nodes else ""
        return SlurmNodesError(
            f"{asked}, and {where} has {count(len(hosts), 'node')} up that can hold that{capped}, so it would "
            f"wait for ever. HINT: set launch.nodes to at most {most} (more launch.devices per node instead), "
            f"{OTHER_PARTITION}."
        )
    unrunnable = wanted.gpus and ranks_cannot_run(asked, wanted, partition)
    if unrunnable:
        return unrunnable
    cpus, memory = partition.capacity(largest)
    gpus = largest.gpu_ranks(wanted.gpu_type, wanted.build)
    downs = f"; {down} more down or drained" if down else ""
    if wanted.gpus and not gpus:
        kinds = sorted({kind for node in partition.nodes for kind in node.gpus if kind})
        fix = (
            f"set site.gpu_type to one its nodes have ({', '.join(kinds)}) or to null"
            if kinds
            else ("set launch.accelerator: cpu (or declare site.accelerator: cpu)")
        )
        has = f"the largest: {largest.describe((cpus, memory), None)}{downs}"
        return SlurmNodesError(
            f"{asked}, and no node of {where} has such GPUs ({has}). HINT: {fix}, {OTHER_PARTITION}."
        )
    has = f"the largest: {largest.describe((cpus, memory), wanted.gpu_type if wanted.gpus else None)}{downs}"
    # Each fix lowers another part of the request: all of them are needed.
    fixes = _fixes(launch, wanted, cpus, memory, gpus)
    smaller = _smaller_sites(runs, site, cpus, memory, gpus) if wanted.gpus else {}
    if smaller:
        given = _flow({**declared, **smaller})
        where_given = "(or that entry in the profile's config:)"
        fixes.append(f'lower the sizes per GPU so that every run fits: --config "site={given}" {where_given}')
    if not fixes:
        # Only a partition's own cap on memory or CPUs per node is left (MaxMemPerNode, MaxCPUsPerNode).
        fixes = [f"ask each node for at most {cpus} CPUs and {memory} MB"]
    return SlurmNodesError(
        f"{asked}, and no node of {where} has that much ({has}), so it would wait for ever. "
        f"HINT: {' and '.join(fixes)}, {OTHER_PARTITION}."
    )


def without_bf16(run_id: str, wanted: Need, partition: str, hosts: list[Node]) -> SlurmNodesError | None:
    """A bf16 run whose job could start only on GPUs without native bfloat16 (compute capability under 8.0,
    as the GRES types name their models): each rank would stop at start-up, after the queue. None else, and
    where a host's GPUs are of a model nobody named."""
    if not (wanted.gpus and wanted.precision.startswith("bf16")):
        return None
    kinds = {kind for node in hosts for kind, n in node.kinds(wanted.gpu_type).items() if runnable(kind, wanted.build)}
    codes = {kind: cudabuild.model_capability(kind) if kind else None for kind in kinds}
    if not codes or any(code is None or code >= 80 for code in codes.values()):
        return None
    named = ", ".join(f"{kind} ({code // 10}.{code % 10})" for kind, code in sorted(codes.items()))
    return SlurmNodesError(
        f"run {run_id}: trainer.precision={wanted.precision}, and the GPUs of Slurm partition {partition} that "
        f"could hold its job have no native bfloat16, which needs compute capability 8.0 or newer: {named}; "
        "every rank would stop at start-up, after the queue. HINT: set trainer.precision: 16-mixed (or 32-true) "
        f"for these GPUs, {OTHER_GPUS}."
    )


def ranks_cannot_run(asked: str, wanted: Need, partition: Partition) -> SlurmNodesError | None:
    """Why the ranks could not train on the GPUs of ``partition`` that are there for them, where that is why
    no node holds the job: a model the build has no kernels for, or MIG slices, one a process. None else."""
    kinds = partition.gpu_kinds(wanted.gpu_type)
    if not kinds:
        return None
    where = f"Slurm partition {partition.name}"
    runnable_kinds = [kind for kind in kinds if runnable(kind, wanted.build)]
    if not runnable_kinds:
        models = sorted({kind for kind in kinds if kind})
        codes = sorted({cudabuild.model_capability(kind) for kind in models})
        named = ", ".join(f"{code // 10}.{code % 10}" for code in codes)
        return SlurmNodesError(
            f"{asked}, and the GPUs of {where} are {', '.join(models)} (compute capability {named}), which torch's "
            f"CUDA {wanted.build} build has no kernels for: every rank would stop before its first kernel, after "
            f"the queue. HINT: {install_hint(cudabuild.builds_for(min(codes)))}, or set site.gpu_type to GPUs "
            f"the {wanted.build} build runs on, {OTHER_GPUS}."
        )
    slices = sorted(kind for kind in runnable_kinds if is_mig(kind))
    if slices and wanted.gpus > 1 and all(is_mig(kind) for kind in runnable_kinds):
        return SlurmNodesError(
            f"{asked}, and the GPUs of {where} are MIG slices ({', '.join(slices)}): a CUDA process enumerates "
            f"one MIG slice, so each node holds one rank of a job, and the job's second rank on a node would "
            "find no device. HINT: set launch.devices: 1 (more launch.nodes for more ranks), or train on whole "
            "GPUs (set-resources: train: slurm_partition in the profile, or site.gpu_type)."
        )
    return None


def check(
    runs: Mapping[str, tuple[Launch, Trainer]],
    accelerator: Callable[[Launch], str],
    site: Site,
    declared: Mapping[str, Any],
    nodes: TrainingNodes,
    build: str | None = None,
) -> None:
    """Every run to train (``runs``: its launch and trainer parts, by run id) against the nodes of each training rule's
    partitions: the first whose job could start in none of them is refused (SlurmNodesError, one
    line). ``accelerator`` resolves a run's launch where it runs; ``declared`` is the site as given;
    ``build`` the CUDA build of torch the ranks run (None: unknown, no model is refused)."""
    launches = [(launch, accelerator(launch)) for launch, _ in runs.values()]
    for group in nodes.groups.values():
        for (run_id, (_, trainer)), (launch, resolved) in zip(runs.items(), launches, strict=True):
            precision = trainer.precision
            wanted = need(launch, resolved, site, build, precision)
            errors = [refusal(run_id, launch, wanted, partition, launches, site, declared) for partition in group]
            if all(errors):
                # The partition whose nodes come closest says why: a GPU run's, one with GPUs up.
                closest = [error for error, p in zip(errors, group, strict=True) if p.has_gpus] if wanted.gpus else []
                raise (closest or errors)[0]
