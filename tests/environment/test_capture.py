"""The environment record of a stage and what its hash depends on."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from unittest import mock

import torch

from snakeddp.environment import capture as capturing
from snakeddp.environment.capture import capture, conda_info, container_info
from snakeddp.environment.lock import installed
from snakeddp.util.hashing import sha256_file
from tests.gpu_standin import Checks, StandIn
from tests.helpers import REPO, subprocess_env

LOCK = REPO / "envs" / "requirements.lock"
DIGEST = "sha256:" + "ab" * 32


def test_the_record_describes_this_interpreter(tmp_path):
    record = capture("train", LOCK, tmp_path / "train.json", env={})
    assert json.loads((tmp_path / "train.json").read_text()) == record
    assert record["stage"] == "train"
    assert record["torch"] == torch.__version__
    assert record["cuda"] == torch.version.cuda
    assert record["packages"] == {key: pin.version for key, pin in installed().items()}
    assert record["packages"]["lightning"] == "2.6.6"
    assert record["lock_sha256"] == sha256_file(LOCK)
    assert record["container"] is None and record["conda"] is None and record["image"] is None


def test_the_record_and_its_sbom_name_the_locks_the_venv_was_installed_from(tmp_path):
    """This suite's venv is tools/setup.sh --dev's: the core lock and the dev lock, each with its pylock.toml."""
    assert (Path(sys.prefix) / ".snakeddp-dev").is_file()
    record = capture("train", LOCK, tmp_path / "train.json", env={})
    names = [
        ("requirements.lock", "pylock.requirements.toml"),
        ("requirements-dev.lock", "pylock.requirements-dev.toml"),
    ]
    assert record["installed_from"] == [
        {
            "lock": str(LOCK.with_name(lock)),
            "sha256": sha256_file(LOCK.with_name(lock)),
            "pylock": str(LOCK.with_name(pylock)),
            "pylock_sha256": sha256_file(LOCK.with_name(pylock)),
        }
        for lock, pylock in names
    ]
    bom = json.loads((tmp_path / record["sbom"]["file"]).read_text())
    properties = [(p["name"], p["value"]) for p in bom["metadata"]["properties"] if p["name"].startswith("snakeddp:")]
    assert properties == [(f"snakeddp:installed_from:{key}", e[key]) for e in record["installed_from"] for key in e]


def test_recapturing_an_unchanged_environment_gives_the_same_hash(tmp_path):
    first = capture("train", LOCK, tmp_path / "a.json", env={})
    second = capture("train", LOCK, tmp_path / "b.json", env={})
    assert first["hash"] == second["hash"]


def test_a_changed_lock_changes_the_hash(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text(LOCK.read_text())
    before = capture("train", lock, tmp_path / "a.json", env={})["hash"]
    lock.write_text(LOCK.read_text().replace("\nnumpy==2.4.6 ", "\nnumpy==2.4.7 "))
    assert capture("train", lock, tmp_path / "b.json", env={})["hash"] != before


def test_a_container_is_identified_by_its_digest_not_its_name(tmp_path):
    pinned = f"docker://ghcr.io/org/snakeddp@{DIGEST}"
    info = container_info(pinned, {})
    assert info["digest"] == DIGEST and info["reference"] == pinned
    renamed = capture("train", LOCK, tmp_path / "a.json", image=f"docker://mirror.example/snakeddp@{DIGEST}", env={})
    original = capture("train", LOCK, tmp_path / "b.json", image=pinned, env={})
    assert renamed["image"] == original["image"] == DIGEST
    assert renamed["hash"] == original["hash"]


def test_an_apptainer_image_file_is_hashed(tmp_path):
    image = tmp_path / "0123abcd.simg"
    image.write_bytes(b"image contents, first build")
    env = {"APPTAINER_CONTAINER": str(image)}
    first = capture("train", LOCK, tmp_path / "a.json", image="docker://ghcr.io/org/snakeddp:0.1.0", env=env)
    assert first["container"]["runtime"] == "apptainer"
    assert first["image"] == sha256_file(image)
    image.write_bytes(b"image contents, rebuilt under the same tag")
    second = capture("train", LOCK, tmp_path / "b.json", image="docker://ghcr.io/org/snakeddp:0.1.0", env=env)
    assert second["hash"] != first["hash"]


def test_an_unrelated_conda_prefix_is_not_this_environment(tmp_path):
    (tmp_path / "conda-meta").mkdir()
    assert conda_info({"CONDA_PREFIX": str(tmp_path)}) is None
    assert conda_info({}) is None


def test_a_conda_environment_records_its_conda_packages(tmp_path):
    """A real interpreter whose prefix is a conda env (a venv with conda-meta records in it)."""
    prefix = tmp_path / "3f2a9c_"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["purelib"])
    (site / "dev.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    meta = prefix / "conda-meta"
    meta.mkdir()
    for name, version, build in [("python", "3.11.7", "h1234"), ("openssl", "3.5.0", "h0")]:
        record = {"name": name, "version": version, "build": build}
        (meta / f"{name}-{version}-{build}.json").write_text(json.dumps(record))
    code = (
        "import json, os; from snakeddp.environment.capture import conda_info; "
        "print(json.dumps(conda_info(os.environ)))"
    )
    done = subprocess.run(
        [prefix / "bin" / "python", "-c", code],
        capture_output=True,
        text=True,
        env=subprocess_env(CONDA_PREFIX=str(prefix)),
        check=True,
    )
    info = json.loads(done.stdout)
    assert info["env"] == "3f2a9c_"
    assert info["packages"] == {"openssl": "3.5.0=h0", "python": "3.11.7=h1234"}


def test_a_cpu_build_is_recorded_without_importing_torch_as_torch_reports_it(tmp_path):
    # The record must not change (its hash decides whether training reruns), only its cost.
    script = (
        "import json, sys; from snakeddp.environment.capture import accelerator_stack; "
        "stack = accelerator_stack(); print(json.dumps([stack, 'torch' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=subprocess_env()
    )
    stack, imported = json.loads(done.stdout)
    import lightning

    assert imported == bool(torch.version.cuda or torch.version.hip or torch.version.xpu)
    assert stack["torch"] == torch.__version__ and stack["lightning"] == lightning.__version__
    assert stack["cuda"] == torch.version.cuda
    if not imported:
        assert (stack["cudnn"], stack["nccl"], stack["gpus"]) == (None, None, [])


def test_the_attempt_key_reads_a_records_hash_as_provenance_does(tmp_path):
    from snakeddp.provenance.record import environment_info
    from snakeddp.run.attempt import attempt_key
    from snakeddp.run.runfile import RunFile
    from tests.helpers import TINY, make_run

    path = tmp_path / "train.json"
    record = capture("train", LOCK, path, env={})
    assert environment_info(path)["environment_hash"] == record["hash"]
    run_yaml, manifest = make_run(tmp_path, TINY)
    config = RunFile.load(run_yaml).config
    key = attempt_key(config, manifest, path)
    assert key == attempt_key(config, manifest, {"hash": record["hash"]})
    assert key != attempt_key(config, manifest, None) == attempt_key(config, manifest, tmp_path / "missing.json")


def stack_on(checks: Checks, standin: StandIn) -> dict:
    """The accelerator stack a stage records on the stand-in machine (its own process, as a stage runs)."""
    script = (
        "import json; from snakeddp.environment.capture import accelerator_stack; "
        "print(json.dumps(accelerator_stack()))"
    )
    done = checks.run(standin, standin.env(subprocess_env()), script)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_cuda_build_records_each_gpus_compute_capability_and_the_driver(standin_checks, tmp_path):
    v100s = StandIn(tmp_path, count=2, model="Tesla V100-SXM2-32GB", capability="7.0", build="12.6", driver="570.86.15")
    stack = stack_on(standin_checks, v100s)
    assert stack["nvidia_driver"] == "570.86.15" and stack["torch"] == "2.13.0+cu126"
    assert stack["gpus"] == ["Tesla V100-SXM2-32GB"] * 2 and stack["gpu_capabilities"] == ["7.0", "7.0"]
    assert stack["cuda"] == "12.6" and stack["nccl"] == "2.27.7"


def test_a_gpu_cuda_cannot_initialise_is_recorded_and_the_record_never_raises(standin_checks, tmp_path):
    """The CUDA 13.0 build under driver 570: torch's first CUDA call would raise "driver too old"."""
    stack = stack_on(standin_checks, StandIn(tmp_path, driver="570.86.15"))
    assert stack["nvidia_driver"] == "570.86.15" and stack["cuda"] == "13.0"
    assert stack["gpus"] == ["NVIDIA A100-SXM4-40GB"] and stack["gpu_capabilities"] == ["8.0"]


def test_a_cpu_build_still_names_the_nodes_driver(standin_checks, tmp_path):
    stack = stack_on(standin_checks, StandIn(tmp_path, build="cpu"))
    assert stack["nvidia_driver"] == "580.95.05" and stack["cuda"] is None
    assert stack["gpus"] == [] and stack["gpu_capabilities"] == []


def test_the_driver_and_gpus_stay_out_of_the_hash(tmp_path):
    """Nodes of one cluster differ in driver and GPU; the software a stage ran in does not."""
    first = capture("train", LOCK, tmp_path / "a.json", env={})
    with mock.patch.object(capturing, "nvidia_driver", return_value="999.1"):
        second = capture("train", LOCK, tmp_path / "b.json", env={})
    assert second["versions"]["nvidia_driver"] == "999.1" and first["hash"] == second["hash"]
