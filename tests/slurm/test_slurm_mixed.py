"""Slurm partitions that mix GPUs the ranks' build runs with GPUs it does not (A100s beside a V100 under the
CUDA 13.0 build): a GPU train job asks for the type it runs (--gres=gpu:a100:N), so Slurm never places it on
the V100, where every rank would stop after the queue; said once. Scontrol's answers as Slurm 22.05 prints
them (tests/slurm/test_slurm_nodes.py's lines), through the slurm platform's resources and the plugin's sbatch;
then the real cluster (tests/slurm/cluster.py), a train job sent to partitions main (A100s) and v100 at once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from snakeddp import config as configuration
from snakeddp.config import parts
from snakeddp.slurm import mixed as mixed_gpus
from snakeddp.slurm import nodes as slurm_nodes
from snakeddp.slurm.exclude import Exclusions
from snakeddp.slurm.platform import Slurm, SlurmState
from tests.slurm.cluster import NODES, OTHER_GPUS
from tests.slurm.test_slurm_gpu import tres
from tests.slurm.test_slurm_nodes import node, partition, slurm_answering
from tests.slurm.workflow import SlurmWorkflow, config, run_uuid
from tests.slurm_requests import submit_command

A100, V100, H100 = "gpu:a100:2(S:0-1)", "gpu:v100:2(S:0-1)", "gpu:h100:2(S:0-1)"


def partitions(*gres: str, state: str = "IDLE") -> list[slurm_nodes.Partition]:
    lines = [node(gres=kind, state=state).replace("NodeName=n1", f"NodeName=n{i}") for i, kind in enumerate(gres)]
    return list(slurm_nodes.ask(slurm_answering(lines, [partition()])).values())


@pytest.mark.parametrize(
    ("gres", "build", "typed"),
    [
        ((A100, V100), "13.0", ("a100", ["v100"])),
        ((A100, V100), "12.6", (None, [])),  # the 12.6 build runs both: untyped, as before
        ((A100, H100, V100), "13.0", (None, ["v100"])),  # two types it runs: one --gres cannot name both
        (("gpu:2", V100), "13.0", (None, ["v100"])),  # untyped GPUs: their model is unknown
        ((A100, A100), "13.0", (None, [])),
        ((A100, V100), None, (None, [])),  # the ranks' build unknown (a CPU environment.cuda)
    ],
)
def test_the_type_a_job_asks_for_where_a_partition_mixes_gpus_the_build_runs_and_not(gres, build, typed):
    assert mixed_gpus.typed_request(partitions(*gres), build) == typed


def test_a_partition_of_gpus_the_build_cannot_run_is_left_to_the_check_that_refuses_it():
    said: list[str] = []
    assert mixed_gpus.decide(partitions(V100, V100), "13.0", said.append) == mixed_gpus.MixedGpus() and not said


def test_a_drained_v100_node_mixes_nothing():
    (main,) = partitions(A100)
    drained = partitions(V100, state="IDLE+DRAIN")
    assert mixed_gpus.typed_request([main, *drained], "13.0") == (None, [])


def invocation(gres: tuple[str, ...], site: dict) -> SimpleNamespace:
    lines = [node(gres=kind).replace("NodeName=n1", f"NodeName=n{i}") for i, kind in enumerate(gres)]
    settings = SimpleNamespace(overwrite_resources={}, default_resources=None)
    nodes = slurm_nodes.TrainingNodes(settings, ("train",), run=slurm_answering(lines, [partition()]))
    said: list[str] = []
    validated = configuration.validate({"site": site})
    return SimpleNamespace(
        typed=True,
        state=SlurmState(nodes=nodes),
        config=validated,
        site=parts.Site.of(validated["site"]),
        same_interpreter=False,
        say=said.append,
        said=said,
    )


def gres_of(flow: SimpleNamespace, launch: dict, accelerator: str) -> tuple[str, str]:
    """The train rule's gres as the platform computes it for a job, and the plugin's sbatch line for it."""
    resolved = parts.Launch.of(configuration.validate({"launch": launch})["launch"])
    resources = Slurm().resources(flow, lambda wc: resolved, lambda wc: accelerator)
    values = {name: value(None) for name, value in resources.items()}
    return values["gres"], submit_command({**values, "nodes": 1, "mem_mb": 1000, "runtime": 30})


def test_a_gpu_job_on_a_mixed_partition_asks_for_the_gpus_its_build_runs_and_says_so_once():
    flow = invocation((A100, V100), {"accelerator": "gpu"})
    gres, command = gres_of(flow, {"devices": 2}, "gpu")
    assert gres == "gpu:a100:2" and "--gres=gpu:a100:2" in command, command
    assert gres_of(flow, {"devices": 1}, "gpu")[0] == "gpu:a100:1"
    assert flow.said == [
        "snakeddp: GPU train jobs ask for a100 GPUs (--gres=gpu:a100:N): Slurm partition main also has v100 GPUs, "
        "which torch's CUDA 13.0 build has no kernels for."
    ]
    # A CPU run asks for no GPUs; a declared site.gpu_type is kept, whatever the partition holds.
    assert gres_of(flow, {"devices": 2}, "cpu")[0] == ""
    declared = invocation((A100, V100), {"accelerator": "gpu", "gpu_type": "v100"})
    assert gres_of(declared, {"devices": 2}, "gpu")[0] == "gpu:v100:2" and not declared.said
    # A partition of one kind: untyped, as before, and nothing said.
    plain = invocation((A100, A100), {"accelerator": "gpu"})
    assert gres_of(plain, {"devices": 2}, "gpu")[0] == "gpu:2" and not plain.said


def test_where_the_build_runs_two_types_of_a_partition_untyped_gpu_jobs_leave_out_the_other_nodes(tmp_path):
    """A100s and H100s beside a V100 (n2) under the 13.0 build: one --gres cannot name a100 and h100 both, so the
    job stays untyped and its sbatch leaves n2 out, beside the nodes where the run hung before (none here)."""
    flow = invocation((A100, H100, V100), {"accelerator": "gpu"})
    gres, _ = gres_of(flow, {"devices": 2}, "gpu")
    assert gres == "gpu:2"

    def also(job: SimpleNamespace) -> set[str]:  # as the platform gives it when the jobs start
        return mixed_gpus.left_out(Slurm().mixed(flow), job)

    exclusions = Exclusions(("train",), flow.say, results=tmp_path, also=also)
    job = SimpleNamespace(rule=SimpleNamespace(name="train"), wildcards_dict={"run": "base"}, resources={"gres": gres})
    assert exclusions.nodes_of(job) == {"n2"}
    assert flow.said == [
        "snakeddp: GPU train jobs leave out n2 (sbatch --exclude): Slurm partition main also has v100 GPUs, which "
        "torch's CUDA 13.0 build has no kernels for, and one --gres cannot name every type it runs (site.gpu_type "
        "names one)."
    ]
    # A CPU job, a typed one and another rule's job leave nothing out.
    for other in ({"gres": ""}, {"gres": "gpu:a100:2"}):
        assert exclusions.nodes_of(SimpleNamespace(**{**vars(job), "resources": other})) == set()
    assert exclusions.nodes_of(SimpleNamespace(**{**vars(job), "rule": SimpleNamespace(name="report")})) == set()


def train_in_partitions(slurm_cluster, tmp_path, partitions: str, devices: int) -> tuple[SlurmWorkflow, str]:
    """One GPU run's train job sent to ``partitions`` (the profile's slurm_partition), not retried: the workflow
    and what it said."""
    flow = SlurmWorkflow(tmp_path / "flow", slurm_cluster)
    flow.directory.mkdir()
    launch = {"accelerator": "gpu", "devices": devices, "mem_mb": None}
    flow.write_config(config(trainer={"max_epochs": 1}, launch=launch))
    where = ("--set-resources", f"train:slurm_partition='{partitions}'")
    small = "site={cpus_per_gpu: 1, mem_mb_per_gpu: 500}"
    done = flow.run(*where, "--config", small, "--retries", "0", "results/runs/base/provenance.json", check=False)
    return flow, done.stdout + done.stderr


@pytest.mark.slurm
@pytest.mark.e2e
def test_a_job_sent_to_a100_and_v100_partitions_asks_for_a100s_and_runs_on_one(slurm_cluster, tmp_path):
    """`-p main,v100` (the profile's slurm_partition): Slurm starts a job in whichever partition can start it first,
    and an untyped --gres=gpu:2 fits the v100 node as well as the A100 ones; typed, only an A100 node holds it."""
    flow, said = train_in_partitions(slurm_cluster, tmp_path, "main,v100", devices=2)
    assert said.count("snakeddp: GPU train jobs ask for a100 GPUs (--gres=gpu:a100:N): Slurm partition main, v100") == 1
    fields = "JobID,State,NodeList%60,ReqTRES%200,Comment%200"
    out = flow.slurm("sacct", "--allocations", "--parsable2", f"--format={fields}", f"--name={run_uuid(said)}")
    (job,) = [row.split("|") for row in out.splitlines()[1:] if "rule_train_" in row]
    asked = tres(job[3])
    assert asked.get("gres/gpu:a100") == "2" and "gres/gpu:v100" not in asked, job
    # Where it ran: an A100 node, never the v100 one (its ranks then stop there: this machine has no GPU).
    assert job[2] in NODES and job[2] not in OTHER_GPUS and job[1] == "FAILED", job


@pytest.mark.slurm
@pytest.mark.e2e
def test_a_job_sent_to_a100_mig_and_v100_partitions_leaves_the_v100_node_out(slurm_cluster, tmp_path):
    """`-p main,mig,v100`: the build runs the A100s and the MIG slices (two types, which one --gres cannot name),
    so the job asks for any GPU and leaves the v100 node out; it runs on an A100 or MIG node."""
    flow, said = train_in_partitions(slurm_cluster, tmp_path, "main,mig,v100", devices=1)
    (v100,) = [name for name, (partition, _, _) in OTHER_GPUS.items() if partition == "v100"]
    line = f"snakeddp: GPU train jobs leave out {v100} (sbatch --exclude): Slurm partition main, mig, v100 also has"
    assert said.count(line) == 1, said[-3000:]
    fields = "JobID,State,NodeList%60,ReqTRES%200,Comment%200"
    out = flow.slurm("sacct", "--allocations", "--parsable2", f"--format={fields}", f"--name={run_uuid(said)}")
    (job,) = [row.split("|") for row in out.splitlines()[1:] if "rule_train_" in row]
    assert tres(job[3]).get("gres/gpu") == "1" and job[2] != v100 and job[1] == "FAILED", job
