"""A run's layout turned into sbatch options by snakemake-executor-plugin-slurm's own code.

The plugin multiplies tasks for some combinations of `tasks`, `gpu`/`gres` and `mpi`; these
tests feed it the train rule's resources and read back the sbatch command it would run. The
sbatch options a profile or the docs suggest go through the plugin's own validation.
"""

import re

import pytest
import yaml
from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

from tests.helpers import REPO
from tests.slurm_requests import submit_command, train_resources

# What profiles/slurm's commented site line declares, with the defaults it keeps.
GPU_SITE = {"accelerator": "gpu", "gpu_type": None, "mem_mb_per_gpu": 16000, "cpus_per_gpu": 4}


def sbatch_options(site: dict | None = None, **launch) -> str:
    return submit_command(train_resources(launch, site))


OPTION = re.compile(r"--(nodes|ntasks|ntasks-per-node|ntasks-per-gpu|cpus-per-task|gres|gpus)=(\S+)")


def options(command: str) -> dict[str, str]:
    return dict(OPTION.findall(command))


@pytest.mark.parametrize(
    ("launch", "expected"),
    [
        ({}, {"nodes": "1", "ntasks": "1", "cpus-per-task": "1"}),
        ({"devices": 2, "threads_per_process": 3}, {"nodes": "1", "ntasks-per-node": "2", "cpus-per-task": "3"}),
        ({"nodes": 2}, {"nodes": "2", "ntasks": "2", "cpus-per-task": "1"}),
        ({"nodes": 2, "devices": 4}, {"nodes": "2", "ntasks-per-node": "4", "cpus-per-task": "1"}),
        (
            {"launcher": "mpirun", "nodes": 2, "devices": 2},
            {"nodes": "2", "ntasks-per-node": "2", "cpus-per-task": "1"},
        ),
        # torchrun is one task that starts the node's processes itself.
        (
            {"launcher": "torchrun", "devices": 2, "threads_per_process": 2},
            {"nodes": "1", "ntasks": "1", "cpus-per-task": "4"},
        ),
    ],
)
def test_one_slurm_task_per_training_process(launch, expected):
    assert options(sbatch_options(**{"accelerator": "cpu", **launch})) == expected


@pytest.mark.parametrize(
    ("launch", "site", "expected"),
    [
        # GPUs per node (gres), site.cpus_per_gpu cores per rank; never --ntasks-per-gpu, never --gpus.
        ({"accelerator": "gpu"}, {}, {"nodes": "1", "cpus-per-task": "4", "gres": "gpu:1"}),
        (
            {"accelerator": "gpu", "devices": 2},
            {"gpu_type": "a100"},
            {"nodes": "1", "ntasks-per-node": "2", "cpus-per-task": "4", "gres": "gpu:a100:2"},
        ),
        (
            {"accelerator": "gpu", "nodes": 2},
            {"gpu_type": "a100", "cpus_per_gpu": 8},
            {"nodes": "2", "ntasks": "2", "cpus-per-task": "8", "gres": "gpu:a100:1"},
        ),
        (
            {"accelerator": "gpu", "nodes": 2, "devices": 4, "launcher": "mpirun"},
            {},
            {"nodes": "2", "ntasks-per-node": "4", "cpus-per-task": "4", "gres": "gpu:4"},
        ),
        # More threads than site.cpus_per_gpu: the threads win.
        (
            {"accelerator": "gpu", "threads_per_process": 6},
            {},
            {"nodes": "1", "cpus-per-task": "6", "gres": "gpu:1"},
        ),
        # auto on Slurm is what the profile declares.
        (
            {"accelerator": "auto", "devices": 2},
            GPU_SITE,
            {"nodes": "1", "ntasks-per-node": "2", "cpus-per-task": "4", "gres": "gpu:2"},
        ),
        (
            {"accelerator": "auto", "devices": 2},
            {"accelerator": "cpu"},
            {"nodes": "1", "ntasks-per-node": "2", "cpus-per-task": "1"},
        ),
    ],
)
def test_gpu_runs_ask_for_gpus_per_node_and_cpus_per_rank(launch, site, expected):
    command = sbatch_options({"accelerator": "gpu", **site}, **launch)
    assert options(command) == expected, command


@pytest.mark.parametrize(("devices", "mem"), [(1, "16000"), (2, "32000")])
def test_gpu_memory_is_sized_per_rank_unless_the_run_sets_it(devices, mem):
    assert f"--mem {mem} " in sbatch_options(GPU_SITE, devices=devices, accelerator="auto")
    assert "--mem 4000 " in sbatch_options({"accelerator": "cpu"}, devices=devices, accelerator="auto")
    assert "--mem 900 " in sbatch_options(GPU_SITE, devices=devices, accelerator="gpu", mem_mb=900)


def test_every_run_keeps_training_out_of_the_jobstep_srun():
    # The jobstep plugin checks for the key; the submit plugin ignores an empty value.
    assert train_resources({"accelerator": "cpu"})["mpi"] == ""
    assert train_resources({"accelerator": "cpu", "devices": 2})["mpi"] == "srun"


def test_site_options_are_the_plugins_resources():
    """constraint, qos, partition and account as profiles/slurm sets them (resources), as sbatch gets them."""
    resources = {
        **train_resources({"accelerator": "gpu"}, {"gpu_type": "a100"}),
        "constraint": "a100&ib",
        "qos": "long",
    }
    command = submit_command(resources, account="-A 'proj'", partition="-p 'gpu'")
    assert "-C 'a100&ib'" in command and "--qos=long" in command
    assert "-A 'proj'" in command and "-p 'gpu'" in command


# Where sbatch options are suggested: every profile and every page of the docs.
SUGGESTING = [*sorted((REPO / "profiles").rglob("*.yaml")), *sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
# A quoted or backticked run of sbatch options ("--signal=USR1@90", '-C a100'), YAML's nested quotes included.
QUOTED_OPTIONS = re.compile(r"""(["'`])['"]?(?P<value>-[-A-Za-z][^"'`\n]*?)['"]?\1""")
# Suggestions sit beside the word: a comment above the key, an example after the sentence.
NEARBY_LINES = 3


def documented_slurm_extra() -> list[tuple[str, str]]:
    """Every sbatch option string within a few lines of a mention of slurm_extra in the profiles and
    docs, commented or not, and every value a profile sets: (file, value)."""
    found = []
    for path in SUGGESTING:
        name, text = str(path.relative_to(REPO)), path.read_text()
        lines = text.splitlines()
        near = {
            j
            for i, line in enumerate(lines)
            if "slurm_extra" in line
            for j in range(max(0, i - NEARBY_LINES), min(len(lines), i + NEARBY_LINES + 1))
        }
        found += [(name, m.group("value")) for j in sorted(near) for m in QUOTED_OPTIONS.finditer(lines[j])]
        if path.suffix == ".yaml":
            found += [(name, value.strip("'\"")) for value in yaml_slurm_extra(yaml.safe_load(text))]
    return found


def yaml_slurm_extra(node) -> list[str]:
    """slurm_extra values a profile sets (set-resources mappings, default-resources entries)."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "slurm_extra" and isinstance(v, str)] + [
            value for v in node.values() for value in yaml_slurm_extra(v)
        ]
    if isinstance(node, list):
        values = [item.partition("=")[2] for item in node if isinstance(item, str) and item.startswith("slurm_extra=")]
        return values + [value for item in node for value in yaml_slurm_extra(item)]
    return []


def forbidden(slurm_extra: str) -> list[str]:
    """The options the plugin refuses in ``slurm_extra`` (its validate_slurm_extra's table)."""
    return [name for pattern, name in get_forbidden_slurm_options().items() if re.search(pattern, slurm_extra)]


def test_no_documented_slurm_extra_is_one_the_plugin_refuses():
    values = documented_slurm_extra()
    # The profile's own value is found, so the search reads these files as they are written.
    assert ("profiles/slurm/config.yaml", "--signal=USR1@90") in values, values
    refused = {(path, value): forbidden(value) for path, value in values if forbidden(value)}
    assert not refused, refused


def test_the_plugins_table_refuses_what_the_old_docs_suggested():
    assert sorted(forbidden("--signal=USR1@90 --qos=long --constraint=a100")) == [
        "node constraints",
        "quality of service",
    ]
    assert forbidden("--gres=gpu:a100:2") == ["generic resources (GRES)"]
