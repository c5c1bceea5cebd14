"""What Slurm says its nodes have, and the jobs that could never start on them.

First what snakeddp.slurm.nodes and snakeddp.slurm.watch read from Slurm's own text (scontrol and
squeue lines as Slurm 22.05 prints them); then the real cluster (tests/slurm/cluster.py): a
workflow whose train rule goes to partition ``cpu`` (one node, no GRES), with auto and no site
declared, trains on the CPU, and a job Slurm keeps pending for a reason no wait clears (its only
node drained; a time limit above its partition's MaxTime) is cancelled in one line, whose HINT, done,
trains the run. (The GPU partition's side, and a request too big for its nodes: test_slurm_walkthrough.py.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake.resources import Resources

from snakeddp import config as configuration
from snakeddp.compat.snakemake_executor_plugin_slurm import read_cancelled_as_failed
from snakeddp.config import parts
from snakeddp.slurm import nodes as slurm_nodes
from snakeddp.slurm import polling
from snakeddp.slurm import watch as slurm_watch
from tests.helpers import REPO
from tests.slurm.cluster import CPU_NODE, CPU_PARTITION
from tests.slurm.workflow import SlurmWorkflow, config, run_uuid

NODE = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.17 "
    "AvailableFeatures=a100,ib ActiveFeatures=a100,ib Gres={gres} NodeAddr=127.0.0.1 NodeHostName=vm "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=23081 AllocMem=0 "
    "FreeMem=17922 Sockets=2 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions={partitions}  BootTime=2026-11-25T14:48:58 CfgTRES=cpu=2,mem=23081M,billing=2"
)
PARTITION = (
    "PartitionName={name} AllowGroups=ALL Default={default} MaxNodes={max_nodes} MaxTime={max_time} MinNodes=0 "
    "MaxCPUsPerNode=UNLIMITED Nodes=n1 State=UP TotalCPUs=2 TotalNodes=1 MaxMemPerNode=UNLIMITED"
)


def node(gres: str = "gpu:a100:2(S:0-1)", state: str = "IDLE", partitions: str = "main", **fields: str) -> str:
    line = NODE.format(gres=gres, state=state, partitions=partitions)
    return " ".join([line, *(f"{key}={value}" for key, value in fields.items())])


def slurm_answering(nodes: list[str], partitions: list[str]) -> Callable[..., str]:
    """scontrol's answers, as snakeddp.slurm.nodes.scontrol returns them."""
    return lambda _, what: "\n".join(nodes if what == "node" else partitions)


def partition(name: str = "main", default: str = "YES", max_nodes: str = "UNLIMITED", max_time: str = "UNLIMITED"):
    return PARTITION.format(name=name, default=default, max_nodes=max_nodes, max_time=max_time)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:a100:2(S:0-1)", {"a100": 2}),
        ("gpu:2", {None: 2}),
        ("(null)", {}),
        ("gpu:a100:2(S:0,1),gpu:v100:1(S:0),shard:8", {"a100": 2, "v100": 1}),
        ("gpu:h100:no_consume:4", {"h100": 4}),
        ("mps:100", {}),
    ],
)
def test_gpus_of_a_nodes_gres(gres, gpus):
    assert slurm_nodes.gpus(gres) == gpus


def test_a_node_line_as_scontrol_prints_it():
    (record,) = slurm_nodes.records(node(partitions="main,short", MemSpecLimit="1081"))
    found = slurm_nodes.Node.from_record(record)
    # Values separated by two blanks and values holding blanks (OS=) are read whole.
    assert (found.name, found.cpus, found.memory_mb, found.partitions) == ("n1", 2, 22000, ("main", "short"))
    assert dict(found.gpus) == {"a100": 2}


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("IDLE", True),
        ("MIXED", True),
        ("ALLOCATED+COMPLETING", True),
        ("IDLE+CLOUD+POWERED_DOWN", True),
        ("IDLE+DRAIN", False),
        ("MIXED+DRAIN", False),
        ("DOWN+NOT_RESPONDING", False),
        ("DOWN+REBOOT_ISSUED", True),
        ("FUTURE", False),
    ],
)
def test_which_node_states_can_hold_a_job(state, usable):
    (record,) = slurm_nodes.records(node(state=state))
    assert slurm_nodes.Node.from_record(record).usable is usable


@pytest.mark.parametrize(
    ("limit", "minutes"),
    [
        ("30", 30),
        ("30:00", 30),
        ("1:30:00", 90),
        ("00:05:00", 5),
        ("1-00:00:00", 1440),
        ("2-3", 3060),
        ("UNLIMITED", None),
    ],
)
def test_slurm_times_in_minutes(limit, minutes):
    assert slurm_watch.minutes(limit) == minutes


def site(**declared) -> dict:
    return configuration.validate({"site": declared})["site"]


def site_part(**declared) -> parts.Site:
    return parts.Site.of(site(**declared))


def planned(config: dict) -> tuple[parts.Launch, parts.Trainer]:
    """A run as the slurm platform's check takes it: its launch and trainer parts, as the plan builds them."""
    return parts.Launch.of(config["launch"]), parts.Trainer.of(config["trainer"])


def resources(train: list[str] = (), default: list[str] = ()) -> SimpleNamespace:
    """Snakemake's resource settings (workflow.resource_settings) from a profile's set-resources:
    train: and default-resources: entries, parsed by Snakemake as it parses them."""
    parse = partial(Resources.parse, allow_expressions=True)
    return SimpleNamespace(
        overwrite_resources={"train": parse(["slurm_extra='--signal=USR1@90'", *train])},
        default_resources=parse(["mem_mb=2000", *default], defaults="bare"),
    )


def refusal(
    nodes: list[str], partitions: list[str], runs: dict[str, dict], declared: dict, build: str | None = None
) -> str | None:
    """The one line check() stops on for ``runs`` (run id -> launch), or None; ``build``: the ranks' CUDA build."""
    resolved = site_part(**declared)
    plan = {rid: planned(configuration.validate({"launch": launch})) for rid, launch in runs.items()}
    training = slurm_nodes.TrainingNodes(resources(), ["train"], slurm_answering(nodes, partitions))
    try:
        slurm_nodes.check(plan, lambda launch: launch.accelerator, resolved, declared, training, build)
    except slurm_nodes.SlurmNodesError as error:
        return str(error)
    return None


def test_the_sizes_per_gpu_the_hint_suggests_fit_every_run():
    runs = {f"devices-{n}": {"accelerator": "gpu", "devices": n} for n in (1, 2)}
    declared = {"gpu_type": "a100"}
    line = refusal([node()], [partition()], runs, declared)
    assert line.startswith("run devices-1: its job asks 1 node for 1 a100 GPU, 4 CPUs and 16000 MB, and no node")
    assert "(the largest: 2 a100 GPUs, 2 CPUs, 23081 MB)" in line
    assert '--config "site={gpu_type: a100, cpus_per_gpu: 1, mem_mb_per_gpu: 11540}"' in line
    assert line.count("HINT:") == 1 and "\n" not in line
    # What the HINT says, done: nothing left to refuse.
    assert refusal([node()], [partition()], runs, {**declared, "cpus_per_gpu": 1, "mem_mb_per_gpu": 11540}) is None


CPU, GPU = {"accelerator": "cpu"}, {"accelerator": "gpu"}


@pytest.mark.parametrize(
    ("nodes", "partitions", "launch", "expected", "done"),
    [
        # More ranks than a node has GPUs: fewer per node (more nodes), each rank sized to fit too.
        ([node()], [partition()], {**GPU, "devices": 4},
         'launch.devices to at most 2 (more launch.nodes instead) and lower the sizes per GPU so that every run fits: '
         '--config "site={cpus_per_gpu: 1, mem_mb_per_gpu: 11540}"',
         ({"devices": 2}, {"cpus_per_gpu": 1, "mem_mb_per_gpu": 11540})),
        ([node()], [partition()], {**CPU, "mem_mb": 64000}, "launch.mem_mb to at most 23081", ({"mem_mb": 23081}, {})),
        ([node()], [partition()], {**CPU, "devices": 2, "threads_per_process": 2},
         "set launch.threads_per_process to at most 1", ({"threads_per_process": 1}, {})),
        ([node()], [partition()], {**CPU, "nodes": 2}, "set launch.nodes to at most 1", ({"nodes": 1}, {})),
        ([node()], [partition(max_nodes="1")], {**CPU, "nodes": 2}, "and lets one job have 1", ({"nodes": 1}, {})),
        ([node(gres="(null)")], [partition()], GPU, "set launch.accelerator: cpu", (CPU, {})),
        ([node(state="IDLE+DRAIN")], [partition()], CPU, "every node of Slurm partition main is down", None),
    ],
)  # fmt: skip
def test_what_no_node_can_hold_is_refused_with_what_to_lower(nodes, partitions, launch, expected, done):
    line = refusal(nodes, partitions, {"base": launch}, {})
    assert line is not None and expected in line and line.count("HINT:") == 1, line
    if done is not None:
        fixed_launch, declared = done
        assert refusal(nodes, partitions, {"base": {**launch, **fixed_launch}}, declared) is None, "the HINT, done"


SMALL = {"cpus_per_gpu": 1, "mem_mb_per_gpu": 500}


@pytest.mark.parametrize("gres", ["gpu:1g.10gb:7", "gpu:nvidia_a100_3g.40gb:2(S:0)", "gpu:1g.10gb+me:4"])
def test_mig_slices_hold_one_rank_of_a_job_per_node(gres):
    """A CUDA process enumerates one MIG slice: a job's second rank on the node would find no device."""
    slices = node(gres=gres)
    line = refusal([slices], [partition()], {"base": {**GPU, "devices": 2}}, SMALL)
    assert line is not None and line.startswith("run base: its job asks 1 node for 2 GPUs, 2 CPUs and 1000 MB")
    assert "the GPUs of Slurm partition main are MIG slices (" in line and "a CUDA process enumerates one" in line
    assert "HINT: set launch.devices: 1 (more launch.nodes for more ranks)" in line and line.count("HINT:") == 1
    # What the HINT says, done: one rank per node fits, on one node or two.
    assert refusal([slices], [partition()], {"base": {**GPU, "devices": 1}}, SMALL) is None
    second = slices.replace("NodeName=n1", "NodeName=n2")
    assert refusal([slices, second], [partition()], {"base": {**GPU, "nodes": 2, "devices": 1}}, SMALL) is None


@pytest.mark.parametrize("declared", [SMALL, {**SMALL, "gpu_type": "v100"}])
def test_gpus_whose_model_the_ranks_build_has_no_kernels_for_are_refused_naming_the_build_that_has(declared):
    v100s = node(gres="gpu:v100:2(S:0-1)")
    line = refusal([v100s], [partition()], {"base": {**GPU, "devices": 2}}, declared, build="13.0")
    assert line is not None and line.startswith("run base: its job asks 1 node for 2 ")
    assert "the GPUs of Slurm partition main are v100 (compute capability 7.0), which torch's CUDA 13.0 build" in line
    # The 12.6 build, which has their kernels, is not locked in this checkout: the HINT says so, and what works.
    assert "HINT: set launch.accelerator: cpu (the CUDA 12.6 build would serve it" in line and line.count("HINT:") == 1
    # What the 12.6 build does once a maintainer has locked it: it runs on them.
    assert refusal([v100s], [partition()], {"base": {**GPU, "devices": 2}}, declared, build="12.6") is None
    # A model the build runs, or a CPU run, is not refused; nor is a GPU of a model nobody named.
    assert refusal([node()], [partition()], {"base": {**GPU, "devices": 2}}, SMALL, build="13.0") is None
    assert refusal([v100s], [partition()], {"base": CPU}, {}, build="13.0") is None
    assert refusal([node(gres="gpu:2")], [partition()], {"base": {**GPU, "devices": 2}}, SMALL, build="13.0") is None


def test_bf16_on_gpus_without_native_bfloat16_is_refused_before_the_queue():
    nodes = [node(gres="gpu:t4:2")]
    training = slurm_nodes.TrainingNodes(resources(), ["train"], slurm_answering(nodes, [partition()]))

    def check(precision: str) -> None:
        config = configuration.validate({"launch": {**GPU, "devices": 1}, "trainer": {"precision": precision}})
        slurm_nodes.check(
            {"base": planned(config)}, lambda launch: launch.accelerator, site_part(**SMALL), SMALL, training, "13.0"
        )

    with pytest.raises(slurm_nodes.SlurmNodesError) as refused:
        check("bf16-mixed")
    line = str(refused.value)
    assert line.startswith("run base: trainer.precision=bf16-mixed, and the GPUs of Slurm partition main that could")
    assert "t4 (7.5)" in line and "HINT: set trainer.precision: 16-mixed (or 32-true)" in line
    check("16-mixed")  # what the HINT says, done


def test_a_gpu_run_is_refused_for_the_partition_whose_gpus_come_closest():
    """sbatch -p cpu,main: the job starts where it fits; when it fits nowhere, the GPU partition says why."""
    nodes = [node(gres="gpu:v100:2"), node(gres="(null)", partitions="cpu").replace("NodeName=n1", "NodeName=n2")]
    answers = slurm_answering(nodes, [partition(), partition("cpu", default="NO")])
    training = slurm_nodes.TrainingNodes(resources(train=["slurm_partition='cpu,main'"]), ["train"], answers)
    plan = {"base": planned(configuration.validate({"launch": {**GPU, "devices": 1}}))}
    with pytest.raises(slurm_nodes.SlurmNodesError, match="GPUs of Slurm partition main are v100"):
        slurm_nodes.check(plan, lambda launch: launch.accelerator, site_part(**SMALL), SMALL, training, "13.0")


@pytest.mark.parametrize(
    ("train", "partitions", "expected"),
    [
        (
            ["slurm_partition='gpu'"],
            [partition()],
            "which Slurm does not know (it has main). HINT: set slurm_partition",
        ),
        ([], [partition(default="NO")], "Slurm marks none as default (sinfo shows no *). HINT: set one in the profile"),
    ],
)
def test_a_partition_slurm_does_not_know_or_none_at_all(train, partitions, expected):
    answers = slurm_answering([node()], partitions)
    with pytest.raises(slurm_nodes.SlurmNodesError, match=re.escape(expected)):
        slurm_nodes.TrainingNodes(resources(train=train), ["train"], answers).accelerator()
    # What the HINT says, done: a partition Slurm lists.
    assert (
        slurm_nodes.TrainingNodes(resources(train=["slurm_partition=main"]), ["train"], answers).accelerator() == "gpu"
    )


def test_auto_with_a_gpu_and_a_cpu_partition_for_training_is_refused():
    nodes = [node(), node(gres="(null)", partitions="cpu").replace("NodeName=n1", "NodeName=n2")]
    settings = resources(train=["slurm_partition=main"])
    settings.overwrite_resources["search_train"] = Resources.parse(["slurm_partition=cpu"], allow_expressions=True)
    answers = slurm_answering(nodes, [partition(), partition("cpu", default="NO")])
    training = slurm_nodes.TrainingNodes(settings, ["train", "search_train"], answers)
    runs = {"base": {"config": {"launch": {"accelerator": "auto"}}}}
    with pytest.raises(slurm_nodes.SlurmNodesError, match=r"search_train to cpu \(cpu\), train to main \(gpu\)\. HINT"):
        slurm_nodes.settle_site(site(), runs, training, {})
    # What the HINT says, done: declared, Slurm's answer is not needed.
    assert slurm_nodes.settle_site(site(accelerator="gpu"), runs, training, {})["accelerator"] == "gpu"


def test_auto_is_what_the_partitions_nodes_have():
    nodes = [node(), node(gres="(null)", partitions="cpu").replace("NodeName=n1", "NodeName=n2")]
    partitions = [partition(), partition(name="cpu", default="NO")]
    runs = {"base": {"config": {"launch": {"accelerator": "auto"}}}}
    # The train rule's partition from set-resources (quoted twice), else default-resources, else Slurm's default.
    for settings, expected in (
        (resources(train=["slurm_partition='cpu'"], default=["slurm_partition=main"]), "cpu"),
        (resources(default=["slurm_partition=cpu"]), "cpu"),
        (resources(), "gpu"),
    ):
        training = slurm_nodes.TrainingNodes(settings, ["train"], slurm_answering(nodes, partitions))
        assert slurm_nodes.settle_site(site(), runs, training, {})["accelerator"] == expected
    # Drained nodes have no GPUs to offer: auto is what the nodes that are up have, and one line says why.
    drained = [node(state="IDLE+DRAIN"), node(gres="(null)", partitions="main").replace("NodeName=n1", "NodeName=n2")]
    said = []
    training = slurm_nodes.TrainingNodes(resources(), ["train"], slurm_answering(drained, partitions))
    assert slurm_nodes.settle_site(site(), runs, training, {}, say=said.append)["accelerator"] == "cpu"
    assert said == [
        "snakeddp: launch.accelerator auto on Slurm means cpu (partition main: 1 node up without, 1 down or drained)."
    ]
    # Declared wins; inside a job the invocation's exported answer is taken, Slurm never asked.
    assert slurm_nodes.settle_site(site(accelerator="cpu"), runs, training, {})["accelerator"] == "cpu"
    exported = {"SNAKEDDP_SITE": '{"accelerator": "gpu"}'}
    assert slurm_nodes.settle_site(site(), runs, None, exported)["accelerator"] == "gpu"


def test_the_plugin_counts_a_job_cancelled_by_anyone_as_failed():
    """sacct says "CANCELLED by <uid>", which snakemake-executor-plugin-slurm 2.8.0 took for a running
    job; its status query, as the workflow's watch leaves it, says CANCELLED, a failed state."""
    import snakemake_executor_plugin_slurm as plugin
    from snakemake_executor_plugin_slurm.job_status_query import query_job_status as unwrapped

    sacct = "printf '12|CANCELLED by 0\\n13|RUNNING\\n14|CANCELLED\\n'"
    logger = logging.getLogger("test")
    assert asyncio.run(unwrapped(sacct, logger))[0]["12"] == "CANCELLED by 0"
    assert read_cancelled_as_failed() and read_cancelled_as_failed(), "once, whatever is called twice"
    states, _ = asyncio.run(plugin.query_job_status(sacct, logger))
    assert states == {"12": "CANCELLED", "13": "RUNNING", "14": "CANCELLED"}


def pending(reason: str, partition_name: str = "main") -> slurm_watch.Pending:
    line = f"12|{partition_name}|/w|rule_train_wildcards_devices-1|1|2|16000M|gres:gpu:a100:1|30:00|{reason}"
    job = slurm_watch.Pending.from_line(line)
    assert job is not None
    return job


@pytest.mark.parametrize(
    ("reason", "ends"),
    [
        ("Resources", False),
        ("Priority", False),
        ("AssocGrpGRES", False),
        ("QOSMaxJobsPerUserLimit", False),
        ("PartitionDown", False),
        ("BeginTime", False),
        ("PartitionConfig", True),
        ("BadConstraints", True),
        ("QOSMaxGRESPerJob", True),
        ("AssocMaxNodesPerJobLimit", True),
        ("PartitionTimeLimit", True),
    ],
)
def test_which_reasons_end_a_pending_job(reason, ends):
    answer = slurm_nodes.ask(slurm_answering([node()], [partition(max_time="00:05:00")]))
    assert (slurm_watch.verdict(pending(reason), lambda: answer) is not None) is ends


@pytest.mark.parametrize("reason", ["PartitionTimeLimit", "PartitionConfig"])
def test_a_time_limit_above_maxtime_is_named_whichever_partition_reason_slurm_gives(reason):
    """Slurm 22.05 said PartitionConfig for a 30-minute job on a 5-minute partition on CI's machine."""
    short = slurm_nodes.ask(slurm_answering([node()], [partition(max_time="00:05:00")]))
    why, hint = slurm_watch.verdict(pending(reason), lambda: short)
    assert why == "its time limit (30:00) is above what partition main allows (its MaxTime, 5 minutes)", why
    assert hint.startswith("lower launch.runtime (minutes) to at most 5, or train on another partition"), hint
    long = slurm_nodes.ask(slurm_answering([node()], [partition(max_time="01:00:00")]))
    why, _ = slurm_watch.verdict(pending(reason), lambda: long)
    expected = {"PartitionConfig": "it asks for more than partition main lets one job have"}
    assert why == expected.get(reason, "its time limit (30:00) is above what partition main allows"), why


@pytest.mark.parametrize("reason", ["ReqNodeNotAvail, UnavailableNodes:n1", "Nodes required for job are DOWN, DRAINED"])
def test_a_node_reason_ends_a_job_only_when_no_node_that_could_hold_it_is_up(reason):
    up = slurm_nodes.ask(slurm_answering([node(state="ALLOCATED")], [partition()]))
    drained = slurm_nodes.ask(slurm_answering([node(state="IDLE+DRAIN")], [partition()]))
    assert slurm_watch.verdict(pending(reason), lambda: up) is None
    why, hint = slurm_watch.verdict(pending(reason), lambda: drained)
    assert why.startswith("no node of partition main that could hold it is up (n1 down or drained)"), why
    assert hint.startswith("run again when `sinfo -p main` shows such nodes idle or mixed"), hint


@pytest.mark.parametrize("variable", [polling.WATCH_VARIABLE, polling.STATUS_VARIABLE])
def test_how_often_slurm_is_asked_is_what_its_variable_says_and_what_is_no_interval_is_refused(variable):
    assert polling.seconds(variable, 10.0, {}) == 10.0 and polling.seconds(variable, None, {}) is None
    assert polling.seconds(variable, 10.0, {variable: " 2.5"}) == 2.5
    for given in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(slurm_nodes.SlurmNodesError) as refused:
            polling.seconds(variable, 10.0, {variable: given})
        line = str(refused.value)
        assert "\n" not in line and line.count("HINT:") == 1, line
        assert line.startswith(f"{variable}={given!r} is not a number of seconds above 0"), line
        # What the HINT says, both ways.
        example = re.search(r"e\.g\. (\w+)=(\S+),", line)
        assert polling.seconds(variable, None, {example.group(1): example.group(2)}) == 10.0
        assert "or unset it" in line and polling.seconds(variable, None, {}) is None


def test_the_watch_looks_as_often_as_its_variable_says(monkeypatch):
    assert slurm_watch.PendingWatch(print)._poll_s == slurm_watch.POLL_S == 10.0
    monkeypatch.setenv(polling.WATCH_VARIABLE, "2")
    assert slurm_watch.PendingWatch(print)._poll_s == 2.0


def test_the_plugins_status_checks_wait_no_longer_than_the_cap(monkeypatch):
    """The plugin's own check (2.8.0) with no active job sets its next wait to init-seconds (40 here); with the
    cap set, the wait after it is the cap's, and without, the plugin's."""
    import snakemake_executor_plugin_slurm as plugin

    monkeypatch.setattr(plugin.Executor, "check_active_jobs", plugin.Executor.check_active_jobs)  # put back after

    def check_with(environ: dict[str, str]) -> float:
        polling.cap_status_checks(environ)
        executor = plugin.Executor.__new__(plugin.Executor)
        executor.next_seconds_between_status_checks = None
        executor.workflow = SimpleNamespace(executor_settings=SimpleNamespace(init_seconds_before_status_checks=40))
        executor.logger = logging.getLogger("test")

        async def drain() -> list:
            return [job async for job in executor.check_active_jobs([])]

        assert asyncio.run(drain()) == []
        return executor.next_seconds_between_status_checks

    assert check_with({}) == 40
    assert check_with({polling.STATUS_VARIABLE: "3"}) == 3.0
    assert check_with({polling.STATUS_VARIABLE: "60"}) == 40, "a cap only ever shortens the plugin's wait"


# The real cluster from here on.

TARGET = "results/runs/{run}/provenance.json"
# A partition over the cpu node that lets a job run 5 minutes (made by the test that needs it).
SHORT = "short"
# How often the watch looks at the queue in the workflows below: the test cluster's scheduler passes take a
# second, so the 10 s a real site is looked at would be waiting only.
WATCH_S = 2.0


def partition_profile(directory: Path, name: str) -> Path:
    """profiles/slurm as a site copies it, its train jobs sent to partition ``name``; nothing in site:."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    profile["set-resources"]["train"]["slurm_partition"] = f"'{name}'"
    directory.mkdir(exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return directory


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory, slurm_cluster) -> SlurmWorkflow:
    """One working directory for the tests below: the data and environment jobs run once."""
    directory = tmp_path_factory.mktemp("slurm-nodes")
    workflow = SlurmWorkflow(directory / "flow", slurm_cluster)
    workflow.directory.mkdir()
    return workflow


def wait_for(what: Callable[[], object], seconds: float = 300) -> object:
    deadline = time.monotonic() + seconds
    while not (found := what()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
    return found


def train_job(flow: SlurmWorkflow, run: str) -> tuple[str, str, str] | None:
    """(job id, state, reason) of the run's train job in the queue, if it is there."""
    out = flow.slurm("squeue", "--noheader", "--format=%i|%T|%k|%r")
    for line in out.splitlines():
        job, state, comment, reason = line.split("|", 3)
        if comment == f"rule_train_wildcards_{run}":
            return job, state, reason
    return None


def states(flow: SlurmWorkflow, uuid: str) -> list[str]:
    out = flow.slurm(
        "sacct", "--allocations", "--parsable2", "--noheader", "--format=State,Comment%200", f"--name={uuid}"
    )
    return [line.split("|")[0] for line in out.splitlines() if line.split("|")[1].startswith("rule_train_")]


def cancelled(output: str) -> list[str]:
    return [line for line in output.splitlines() if "can never start" in line]


def snakemake(flow: SlurmWorkflow, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        flow.command(*args),
        cwd=flow.directory,
        env={**flow.env(), polling.WATCH_VARIABLE: str(WATCH_S)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def cpu_node_busy(flow: SlurmWorkflow) -> Iterator[str]:
    """A job holding the cpu node whole; the node back to service (and the job gone) afterwards."""
    blocker = flow.slurm(
        "sbatch", "--parsable", f"--partition={CPU_PARTITION}", "--exclusive", "--output=/dev/null", "--wrap=sleep 900"
    )
    try:
        wait_for(
            lambda: flow.slurm("squeue", "--noheader", "--format=%T", f"--jobs={blocker.strip()}").strip() == "RUNNING"
        )
        yield blocker.strip()
    finally:
        flow.slurm("scancel", blocker.strip())
        flow.slurm("scontrol", "update", f"NodeName={CPU_NODE}", "State=RESUME")


@pytest.mark.slurm
@pytest.mark.e2e
def test_a_job_whose_only_node_is_drained_is_cancelled_in_one_line(flow: SlurmWorkflow, cpu_node_busy: str):
    """Pending behind another job (Resources) it waits; once its partition's only node is drained
    (an admin's act: nothing clears it by waiting) it is cancelled, and Snakemake stops."""
    flow.profile = partition_profile(flow.directory.parent / "cpusite", CPU_PARTITION)
    flow.write_config(config(launch={"accelerator": "auto"}, sweep={"seed": [1]}))
    process = snakemake(flow, "--retries", "0", TARGET.format(run="seed-1"))
    try:
        job, _, _ = wait_for(lambda: train_job(flow, "seed-1"))
        # Two looks of the watcher at a job that waits for the node to be free: it is left alone.
        time.sleep(2.5 * WATCH_S)
        assert train_job(flow, "seed-1")[1:] in {("PENDING", "Resources"), ("PENDING", "Priority")}
        flow.slurm("scontrol", "update", f"NodeName={CPU_NODE}", "State=DRAIN", "Reason=snakeddp-test")
        flow.slurm("scancel", cpu_node_busy)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode != 0
    (line,) = cancelled(output)
    assert line.startswith(f"Slurm job {job} (rule train, seed-1) can never start, so it was cancelled: no node of ")
    assert f"partition {CPU_PARTITION} that could hold it is up ({CPU_NODE} down or drained)" in line
    assert line.count("HINT:") == 1
    # Snakemake saw it fail and stopped: the plugin counts a cancelled job as failed (read_cancelled_as_failed).
    assert states(flow, run_uuid(output)) == ["CANCELLED by 0"]


@pytest.mark.slurm
@pytest.mark.e2e
def test_run_again_once_the_node_is_back_trains_on_the_cpu_partition(flow: SlurmWorkflow):
    """What the HINT above says, done: auto on a partition without GRES is cpu, asked of Slurm."""
    wait_for(lambda: flow.slurm("sinfo", "--noheader", f"--partition={CPU_PARTITION}", "--format=%t").strip() == "idle")
    done = flow.run(TARGET.format(run="seed-1"))
    record = json.loads((flow.directory / TARGET.format(run="seed-1")).read_text())
    assert (record["launch"]["accelerator"], record["launch"]["backend"]) == ("cpu", "gloo")
    (job_id,) = [
        line.split("|")[0]
        for line in flow.slurm(
            "sacct", "--allocations", "--parsable2", "--noheader", "--format=JobID,Comment%200",
            f"--name={run_uuid(done.stdout + done.stderr)}",
        ).splitlines()
        if line.endswith("rule_train_wildcards_seed-1")
    ]  # fmt: skip
    asked = dict(slurm_nodes.records(flow.slurm("scontrol", "--oneliner", "show", "job", job_id))[0])
    assert asked["Partition"] == CPU_PARTITION and asked["JobState"] == "COMPLETED"
    assert "gres" not in asked["TRES"] and "TresPerNode" not in asked, asked


@pytest.fixture
def short_partition(flow: SlurmWorkflow) -> Iterator[str]:
    flow.slurm("scontrol", "create", f"PartitionName={SHORT}", f"Nodes={CPU_NODE}", "MaxTime=5", "State=UP")
    try:
        yield SHORT
    finally:
        flow.slurm("scancel", f"--partition={SHORT}")
        wait_for(lambda: not flow.slurm("squeue", "--noheader", f"--partition={SHORT}").strip(), seconds=60)
        flow.slurm("scontrol", "delete", f"PartitionName={SHORT}")


@pytest.mark.slurm
@pytest.mark.e2e
def test_a_time_limit_above_the_partitions_is_cancelled_once_and_its_hint_trains(
    flow: SlurmWorkflow, short_partition: str
):
    """PartitionTimeLimit never clears: the job and its retry are cancelled, with one line between them;
    launch.runtime lowered as the HINT says, the run trains."""
    flow.profile = partition_profile(flow.directory.parent / "shortsite", short_partition)
    flow.write_config(config(launch={"accelerator": "auto", "runtime": 30}, sweep={"seed": [2]}))
    process = snakemake(flow, "--retries", "1", TARGET.format(run="seed-2"))
    try:
        output, _ = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            process.kill()
            print(process.communicate()[0][-5000:])
    assert process.returncode != 0
    (line,) = cancelled(output)
    hint = "HINT: lower launch.runtime (minutes) to at most 5, or train on another partition"
    assert (
        f"its time limit (30:00) is above what partition {short_partition} allows (its MaxTime, 5 minutes). {hint}"
        in line
    )
    assert states(flow, run_uuid(output)) == ["CANCELLED by 0"] * 2, "the retry cancelled too, without a line"

    flow.write_config(config(launch={"accelerator": "auto", "runtime": 5}, sweep={"seed": [2]}))
    flow.run(TARGET.format(run="seed-2"))
