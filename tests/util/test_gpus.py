"""snakeddp.util.gpus: the GPUs a process will see, without torch or CUDA: CUDA_VISIBLE_DEVICES applied as
torch parses it for CUDA, and the kernel module's files read where NVML does not answer (here: in this
process, NVML left unasked; tests/environment/test_cuda.py and tests/e2e/test_gpus.py meet NVML's answers
through the stand-in driver)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from snakeddp.errors import ConfigError
from snakeddp.util import gpus
from tests.gpu_standin import StandIn
from tests.helpers import subprocess_env


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, Path]:
    """A driver directory listing two A100s and one H100, as /proc/driver/nvidia lists them, and a /dev with
    each GPU's device node."""
    standin = StandIn(tmp_path / "a100", count=2)
    h100 = StandIn(tmp_path / "h100", count=3, model="NVIDIA H100 80GB HBM3")
    last = sorted((h100.root / "driver/nvidia/gpus").iterdir())[-1]
    last.rename(standin.root / "driver/nvidia/gpus/0000:c1:00.0")
    devices = tmp_path / "dev"
    devices.mkdir()
    for minor in (0, 1, 2):
        (devices / f"nvidia{minor}").touch()
    return standin.root / "driver" / "nvidia", devices


def models(env: dict, machine: tuple[Path, Path]) -> list[str]:
    return [gpu.model for gpu in gpus.apply_visible(gpus.driver(*machine, nvml=False), env)]


def test_every_gpu_the_driver_lists_in_bus_order_without_cuda_visible_devices(machine):
    assert models({}, machine) == ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]
    seen = gpus.driver(*machine, nvml=False)
    assert seen.version == "580.95.05" and seen.source == "proc" and seen.listed == 3
    assert gpus.describe({}, seen=seen) == "3 GPUs (NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3)"


@pytest.mark.parametrize(
    "setting, shown",
    [
        ("", []),
        ("2", ["NVIDIA H100 80GB HBM3"]),
        ("2,0", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]),
        ("0,7,1", ["NVIDIA A100-SXM4-40GB"]),  # the runtime stops at the first index that names no GPU
        ("-1", []),
        ("1,1", []),  # a repeated index hides every GPU (torch.cuda._parse_visible_devices)
        ("1gpu,2", ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]),  # read as strtoul reads it
        ("GPU-00000002", ["NVIDIA H100 80GB HBM3"]),  # a unique prefix of a UUID
        ("GPU-00000002,0", ["NVIDIA H100 80GB HBM3"]),  # UUIDs up to the first entry that is none
        ("GPU-0000000", []),  # a prefix of several UUIDs names none
    ],
)
def test_cuda_visible_devices_is_applied_as_torch_parses_it_for_cuda(machine, setting, shown):
    assert models({"CUDA_VISIBLE_DEVICES": setting}, machine) == shown


def test_a_gpu_whose_device_node_is_absent_is_not_reachable_where_nvml_does_not_answer(machine, tmp_path):
    """A container without the GPUs, on a host whose /proc lists them: no NVML, no /dev/nvidia*."""
    driver, _ = machine
    seen = gpus.driver(driver, tmp_path / "container-dev", nvml=False)
    assert seen.enumerable() == [] and seen.listed == 3
    assert gpus.describe({}, seen=seen).startswith(
        "no GPU this process can reach (the host's driver lists 3, and no NVIDIA library or device reaches them"
    )


def test_what_a_message_says_of_hidden_gpus_and_of_a_machine_without_a_driver(machine, tmp_path):
    seen = gpus.driver(*machine, nvml=False)
    assert gpus.describe({"CUDA_VISIBLE_DEVICES": ""}, seen=seen) == (
        "no GPU visible (3 installed, CUDA_VISIBLE_DEVICES='' hides them)"
    )
    assert gpus.describe({"CUDA_VISIBLE_DEVICES": "1"}, seen=seen) == (
        "1 GPU (NVIDIA A100-SXM4-40GB; 2 more hidden by CUDA_VISIBLE_DEVICES='1')"
    )
    nothing = gpus.driver(tmp_path / "none", tmp_path / "none", nvml=False)
    assert gpus.describe({}, seen=nothing) == "no GPU (no NVIDIA driver lists one)" and nothing.version is None


def test_a_process_enumerates_one_mig_slice_of_those_it_may_see():
    slices = tuple(
        gpus.Gpu(f"0:{i}", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", f"MIG-{i}aaa", (8, 0), mig=True) for i in (1, 2)
    )
    seen = gpus.Driver("580.95.05", (), slices, listed=1, source="nvml")
    assert gpus.apply_visible(seen, {}) == [slices[0]]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "MIG-2,MIG-1"}) == [slices[1]]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "MIG-2,MIG-2"}) == []
    assert (
        gpus.describe({}, seen=seen)
        == "1 GPU (NVIDIA A100-SXM4-40GB MIG 1g.5gb; a process enumerates one MIG slice of the 2)"
    )


def test_index_style_cuda_visible_devices_on_a_mig_host_shows_the_indexed_gpus_slice():
    """Index 1 is the driver's second GPU, here in MIG mode: its slices, one of them to a process (CUDA's
    mapping; Slurm sets indices on MIG nodes too)."""
    whole = gpus.Gpu("0", "NVIDIA A100-SXM4-40GB", "GPU-0aaa", (8, 0))
    slices = tuple(gpus.Gpu(f"1:{i}", "NVIDIA A100 MIG 1g.5gb", f"MIG-1{i}aa", (8, 0), mig=True) for i in (0, 1))
    seen = gpus.Driver("580.95.05", (whole,), slices, listed=2, source="nvml")
    assert seen.indexed() == [[whole], list(slices)]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "1"}) == [slices[0]]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "0"}) == [whole]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "1,1"}) == []
    only_mig = gpus.Driver("580.95.05", (), slices, listed=2, source="nvml")
    assert gpus.apply_visible(only_mig, {"CUDA_VISIBLE_DEVICES": "0"}) == [slices[0]]
    assert gpus.apply_visible(only_mig, {"CUDA_VISIBLE_DEVICES": "1"}) == []


# What snakeddp.util.gpus answers in a process on a stand-in machine: NVML's answer, /proc's with the device
# nodes opened, and how long it took (s).
ANSWER = """
import sys, time
from snakeddp.util import gpus
started = time.monotonic()
seen = gpus.driver(nvml=sys.argv[1] == "nvml")
took = time.monotonic() - started
env = {"CUDA_VISIBLE_DEVICES": sys.argv[2]} if len(sys.argv) > 2 else {}
print(seen.source, [gpu.uuid for gpu in gpus.apply_visible(seen, env)], round(took, 1))
print(gpus.describe(env, seen=seen))
"""


def answer(checks, standin: StandIn, *args: str) -> tuple[str, list[str], float, str]:
    done = checks.run(standin, standin.env(subprocess_env()), ANSWER, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    first, described = done.stdout.splitlines()
    source, rest = first.split(" ", 1)
    shown, took = rest.rsplit(" ", 1)
    return source, ast.literal_eval(shown), float(took), described


def test_in_a_one_gpu_device_cgroup_of_a_four_gpu_node_the_allowed_gpu_is_the_one_shown(standin_checks, tmp_path):
    """A Slurm step given GPU 2 (CUDA_VISIBLE_DEVICES=0 from Slurm): NVML counts 4 and answers NO_PERMISSION for
    0, 1 and 3, whose /dev nodes exist and refuse to open. NVML's answer and /proc's both keep GPU 2 alone."""
    node = StandIn(tmp_path, count=4, denied=(0, 1, 3))
    allocated = [node.uuids[2]]
    source, shown, _, described = answer(standin_checks, node, "nvml", "0")
    assert (source, shown) == ("nvml", allocated)
    assert described == "1 GPU (NVIDIA A100-SXM4-40GB; 3 more of the host's denied to this process)"
    assert answer(standin_checks, node, "nvml")[1] == allocated, "unset: the one GPU the step may open"
    source, shown, _, described = answer(standin_checks, node, "proc", "0")
    assert (source, shown) == ("proc", allocated), "the nodes are opened, not only looked for"
    every = answer(standin_checks, node, "proc", "0,1")[1]
    assert every == allocated, "index 1 names no GPU this process may open"
    # A step given none of them where /proc lists no GPU (WSL2's shape): NVML's count is what the host has.
    none = StandIn(tmp_path / "none", count=2, denied=(0, 1), proc=False)
    _, shown, _, described = answer(standin_checks, none, "nvml")
    assert shown == [] and described.startswith("no GPU this process can reach (the host's driver lists 2, "), described


def test_a_driver_library_version_mismatch_shows_no_gpu_in_nvmls_words(standin_checks, tmp_path):
    """After a driver upgrade without a reboot: NVML refuses, CUDA would too, though /proc and /dev show the GPU."""
    upgraded = StandIn(tmp_path, count=2, nvml_init=18)
    source, shown, _, described = answer(standin_checks, upgraded, "nvml")
    assert (source, shown) == ("proc", [])
    assert described == (
        'no GPU this process can use (NVML answers "Driver/library version mismatch"; the host\'s driver lists 2)'
    )


def test_an_nvml_that_does_not_answer_is_abandoned_within_the_timeout_and_said_so(standin_checks, tmp_path):
    """A GPU fallen off the bus blocks nvmlInit (here for 60 s): the answer comes after NVML_TIMEOUT_S."""
    hung = StandIn(tmp_path, nvml_slow_s=60)
    source, shown, took, described = answer(standin_checks, hung, "nvml")
    assert (source, shown) == ("proc", []) and gpus.NVML_TIMEOUT_S <= took < gpus.NVML_TIMEOUT_S + 10, took
    assert described == "no GPU this process can use (NVML did not answer within 5 s; the host's driver lists 1)"


def test_a_container_without_the_gpus_never_sees_the_hosts_device_nodes(standin_checks, tmp_path):
    """The stand-in's container on a host that has /dev/nvidia0 (here itself a stand-in machine, as a real GPU
    host is): its /dev has no NVIDIA node, so /proc's GPU is not counted."""
    host = StandIn(tmp_path / "host", count=1)
    container = StandIn(tmp_path / "container", count=1, reachable=False)
    nested = container.command([sys.executable, "-c", ANSWER, "proc"])
    code = f"import os, subprocess; print(os.path.exists('/dev/nvidia0')); subprocess.run({nested!r}, check=True)"
    done = standin_checks.run(host, container.env(subprocess_env()), code)
    assert done.returncode == 0, done.stderr[-2000:]
    on_host, first, described = done.stdout.splitlines()
    assert on_host == "True" and first.startswith("proc [] "), done.stdout
    assert described.startswith("no GPU this process can reach (the host's driver lists 1"), described


def test_a_lost_gpu_is_left_out_in_nvmls_words_and_the_others_kept(standin_checks, tmp_path):
    """GPU 1 of two fell off the bus: NVML answers "GPU is lost" for its handle, and GPU 0 still serves."""
    host = StandIn(tmp_path / "one-lost", count=2, lost=(1,))
    source, shown, _, described = answer(standin_checks, host, "nvml")
    assert (source, shown) == ("nvml", [host.uuids[0]])
    assert described == '1 GPU (NVIDIA A100-SXM4-40GB; NVML answers GPU 1: "GPU is lost")'
    alone = StandIn(tmp_path / "all-lost", count=1, lost=(0,))
    assert answer(standin_checks, alone, "nvml")[3] == (
        'no GPU this process can use (NVML answers GPU 0: "GPU is lost"; the host\'s driver lists 1)'
    )


def test_slurms_index_on_a_mig_host_is_the_gpus_slice_as_nvml_and_the_stand_ins_cuda_see_it(standin_checks, tmp_path):
    """CUDA_VISIBLE_DEVICES=0 on a GPU in MIG mode (as Slurm sets it there): its first slice, one a process."""
    mig = StandIn(tmp_path, count=2, mig=2)
    assert answer(standin_checks, mig, "nvml", "0")[1] == [mig.mig_uuids[0]]
    assert answer(standin_checks, mig, "nvml", "1")[1] == [mig.mig_uuids[2]]
    # The rank's check before CUDA (it stopped on "CUDA_VISIBLE_DEVICES hides the GPUs" there).
    code = "from snakeddp.environment import cuda; print(cuda.check_device(0))"
    done = standin_checks.run(mig, mig.env(subprocess_env(), visible="1"), code)
    assert done.stdout.strip() == "NVIDIA A100-SXM4-40GB MIG 1g.5gb, compute capability 8.0, CUDA 13.0 build", (
        done.stderr[-2000:]
    )


def test_the_nvml_wait_is_the_variables_seconds_and_no_number_above_0_is_one_line_with_a_hint():
    assert gpus.nvml_timeout_s({}) == gpus.NVML_TIMEOUT_S == 5.0
    assert gpus.nvml_timeout_s({gpus.NVML_TIMEOUT_VARIABLE: " 0.5 "}) == 0.5
    for given in ("abc", "0", "-1", "nan", "inf"):
        with pytest.raises(ConfigError) as refused:
            gpus.nvml_timeout_s({gpus.NVML_TIMEOUT_VARIABLE: given})
        said = str(refused.value)
        assert "\n" not in said and said.startswith(f"SNAKEDDP_NVML_TIMEOUT_S={given!r} is not a number"), said
        # What the HINT says: the number it gives, or unset.
        assert "HINT: set it to one, e.g. SNAKEDDP_NVML_TIMEOUT_S=5, or unset it" in said
        assert gpus.nvml_timeout_s({gpus.NVML_TIMEOUT_VARIABLE: "5"}) == gpus.nvml_timeout_s({}) == 5.0
