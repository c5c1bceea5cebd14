"""AzureML job specs for every layout, built and validated offline by the SDKs themselves.

No workspace is reachable here: v2 specs are checked by ``azure.ai.ml.load_job`` (the same
validation ``az ml job create --file`` runs), v1 run configurations by azureml-core's own
``ScriptRunConfig`` / ``RunConfiguration.load``. Expected values come from the run config and
the lock file, never from the code under test. The SDK v1 tests (marked azureml_v1) run in
.venv-azureml-v1, where azureml-core is installed (tests/azureml/test_sdk_v1.py starts them there).
"""

import copy
import itertools
import os
import shlex
from argparse import Namespace
from pathlib import Path
from unittest import mock

import pytest
import yaml
from azure.ai.ml import MpiDistribution, PyTorchDistribution, load_job
from marshmallow import ValidationError

from snakeddp import config
from snakeddp.azureml import images, spec_v2, staging, submit
from snakeddp.azureml.settings import CHECKOUT, AzureMLError, Settings
from snakeddp.config.site import SiteError
from snakeddp.environment.builds import torch_build
from snakeddp.environment.cuda import locked as cuda_locked
from snakeddp.environment.lock import read_lock
from snakeddp.run import attempt as runstate
from snakeddp.run.runfile import RunFile
from snakeddp.util.hashing import sha256_file
from snakeddp.workflow import jobenv
from tests.azureml.plans import build_plan
from tests.environment.hashed import hashed_envs, unhashed
from tests.helpers import TINY, make_run

# The SDKs' own deprecation chatter (ruamel, marshmallow) says nothing about our specs.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
# AzureML's images of environment.cuda's CUDA major (Azure/AzureML-Containers' README): "13.0" is the default.
DEFAULT_IMAGE = "mcr.microsoft.com/azureml/openmpi5.0-cuda13.1-ubuntu24.04:latest"
CUDA12_IMAGE = "mcr.microsoft.com/azureml/openmpi5.0-cuda12.6-ubuntu24.04:20250701.v1"
CPU_IMAGE = "mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:20250701.v1"
# azureml-core, which snakeddp.azureml.spec_v1 imports, is installed in .venv-azureml-v1 only.
V1 = pytest.mark.azureml_v1
# Every pip line with its hashes (pip then requires them): the core lock less torch, then the build's own lock.
LOCK_PINS = [
    "--require-hashes",
    *(pin.requirement() for key, pin in read_lock(CHECKOUT / "envs/requirements.lock").pins.items() if key != "torch"),
    *(pin.requirement() for pin in read_lock(CHECKOUT / "envs/requirements-torch-13.0.lock").pins.values()),
]


@pytest.fixture(scope="module")
def hashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core lock of an envs/ whose every torch build's lock is hashed (tests.environment.hashed)."""
    return hashed_envs(tmp_path_factory.mktemp("envs")) / "requirements.lock"


def spec_v1():
    from snakeddp.azureml import spec_v1

    return spec_v1


def v1_run_config(plan):
    """The full run configuration of the plan's ScriptRunConfig, as azureml-core submits it."""
    from azureml.core.script_run_config import get_run_config_from_script_run

    return get_run_config_from_script_run(spec_v1().build(plan))


def make_spec(tmp_path, sdk, distribution="pytorch", nodes=1, devices=1, launch=None, **azureml):
    cfg = copy.deepcopy(TINY)
    cfg["launch"].update(nodes=nodes, devices=devices, **(launch or {}))
    run_yaml, manifest = make_run(tmp_path, cfg)
    settings = Settings.from_section({"sdk": sdk, "distribution": distribution, "compute": "gpu-cluster", **azureml})
    args = Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, environment_record=None, dry_run=True)
    plan, key = build_plan(args, settings)
    return plan, key, submit.write_spec(plan), manifest


def expected_command(launcher, data, run_dir, resume=None):
    head = ["python", "-m", "snakeddp.remote.entry", *(["--resume-from", resume] if resume else []), "train", "--"]
    return [
        *head,
        *("--config", "run.yaml", "--run-dir", run_dir, "--data", f"{data}/manifest-3.json"),
        *("--launcher", launcher, "--environment-record", "environment.json"),
    ]


LAYOUTS = list(itertools.product(["pytorch", "mpi"], [1, 2], [1, 2]))


@pytest.mark.parametrize(("distribution", "nodes", "devices"), LAYOUTS)
def test_v2_spec_validates_and_asks_for_the_run_layout(tmp_path, distribution, nodes, devices):
    _, _, spec, manifest = make_spec(tmp_path, "v2", distribution, nodes, devices)
    assert spec.name == "job.yml"
    job = load_job(spec)
    assert job.resources.instance_count == nodes
    kind = PyTorchDistribution if distribution == "pytorch" else MpiDistribution
    assert isinstance(job.distribution, kind)
    assert job.distribution.process_count_per_instance == devices
    assert job.compute == "gpu-cluster"
    assert job.limits.timeout == TINY["launch"]["runtime"] * 60
    launcher = "env" if distribution == "pytorch" else "mpirun"
    assert shlex.split(job.command) == expected_command(launcher, "${{inputs.data}}", "${{outputs.run_dir}}")
    assert job.environment.image == DEFAULT_IMAGE
    assert job.environment.conda_file["dependencies"] == ["python=3.11", "pip", {"pip": LOCK_PINS}]
    data = job.inputs["data"]
    assert (data.type, data.mode) == ("uri_folder", "ro_mount")
    assert (spec.parent / data.path).resolve() == manifest.parent.resolve(), "the local dataset folder is uploaded"
    assert set(job.inputs) == {"data"}, "nothing to resume in a fresh run"
    assert job.outputs["run_dir"].mode == "rw_mount"
    variables = job.environment_variables
    assert variables["SNAKEDDP_PLATFORM"] == "azureml" and variables["SNAKEDDP_AZUREML_COMPUTE"] == "gpu-cluster"
    assert variables["OMP_NUM_THREADS"] == "1"
    assert variables.get("LOCAL_WORLD_SIZE") == (str(devices) if distribution == "pytorch" else None)
    code = spec.parent / job.code
    assert (code / "snakeddp" / "train.py").is_file()
    assert (code / "snakeddp" / "schemas" / "config.schema.yaml").is_file()
    assert RunFile.load(code / "run.yaml").config == RunFile.load(tmp_path / "results/runs/base/run.yaml").config


@V1
@pytest.mark.parametrize(("distribution", "nodes", "devices"), LAYOUTS)
def test_v1_script_run_config_builds_offline_and_asks_for_the_run_layout(tmp_path, distribution, nodes, devices):
    plan, _, spec, manifest = make_spec(tmp_path, "v1", distribution, nodes, devices, launch={"accelerator": "gpu"})
    for run_config in (v1_run_config(plan), spec_v1().load(spec)):
        assert run_config.target == "gpu-cluster"
        assert run_config.node_count == nodes
        if distribution == "pytorch":
            assert run_config.framework == "PyTorch"
            assert run_config.pytorch.process_count == nodes * devices
            assert run_config.pytorch.node_count == nodes
            assert run_config.pytorch.communication_backend.lower() == "nccl"
        else:
            assert run_config.mpi.process_count_per_node == devices
            assert run_config.mpi.node_count == nodes
        launcher = "env" if distribution == "pytorch" else "mpirun"
        assert shlex.split(run_config.command) == expected_command(
            launcher, "$AZUREML_DATAREFERENCE_data", "DatasetOutputConfig:rundir"
        )
        assert run_config.environment.docker.base_image == DEFAULT_IMAGE
        conda = run_config.environment.python.conda_dependencies
        # azureml-core reads --require-hashes as a pip option, and keeps every hashed line as written.
        assert [*conda.pip_options, *conda.pip_packages] == LOCK_PINS
        assert conda.get_python_version() == "3.11"
        data = run_config.data_references["data"]
        assert (data.data_store_name, data.mode) == ("workspaceblobstore", "mount")
        assert data.path_on_data_store == f"snakeddp/datasets/{manifest.parent.name}"
        output = run_config.output_data["rundir"]
        assert output.mechanism == "mount"
        assert output.output_location.data_path.relative_path == "snakeddp/runs/{run-id}/rundir"
        assert set(run_config.data_references) == {"data"}
        assert run_config.max_run_duration_seconds == TINY["launch"]["runtime"] * 60
        assert run_config.environment_variables.get("LOCAL_WORLD_SIZE") == (
            str(devices) if distribution == "pytorch" else None
        )
    assert spec_v1().uploads(plan) == [(manifest.parent.resolve(), f"snakeddp/datasets/{manifest.parent.name}")]


@V1
def test_cpu_runs_ask_v1_for_gloo(tmp_path):
    plan, _, _, _ = make_spec(tmp_path, "v1", "pytorch", 1, 2, launch={"accelerator": "cpu"})
    assert v1_run_config(plan).pytorch.communication_backend.lower() == "gloo"


@pytest.mark.parametrize(
    ("path", "value", "complaint"),
    [
        (("resources", "instance_count"), "two", "Not a valid integer"),
        (("distribution", "process_count_per_instance"), [2], "Not a valid integer"),
        (("distribution", "type"), "horovodx", "distribution"),
    ],
)
def test_v2_validation_rejects_a_wrong_field(tmp_path, path, value, complaint):
    _, _, spec, _ = make_spec(tmp_path, "v2", "pytorch", 2, 2)
    document = yaml.safe_load(spec.read_text())
    document[path[0]][path[1]] = value
    spec.write_text(yaml.safe_dump(document))
    with pytest.raises(ValidationError, match=complaint):
        load_job(spec)
    with pytest.raises(AzureMLError, match=f"{spec} is not a valid AzureML command job"):
        spec_v2.load(spec)


def resumable_run(tmp_path):
    """A run with a checkpoint of its own config to resume: the build_plan arguments and the run directory."""
    _, key, _, manifest = make_spec(tmp_path, "v2")
    run_dir = tmp_path / "results/runs/base"
    runstate.prepare(run_dir, key)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (run_dir / "metrics.csv").write_text("epoch\n0\n")
    return Namespace(config=run_dir / "run.yaml", run_dir=run_dir, data=manifest, environment_record=None), run_dir


def test_resumable_run_uploads_its_attempt(tmp_path):
    args, run_dir = resumable_run(tmp_path)
    plan, _ = build_plan(args, Settings.from_section({"compute": "gpu-cluster"}))
    job = load_job(submit.write_spec(plan))
    command = shlex.split(job.command)
    assert command[:6] == ["python", "-m", "snakeddp.remote.entry", "--resume-from", "${{inputs.resume}}", "train"]
    resume = plan.spec_dir / job.inputs["resume"].path
    assert sorted(p.name for p in resume.iterdir()) == ["checkpoints", "metrics.csv", "run-state.json"]
    assert (resume / "checkpoints/last.ckpt").stat().st_ino == (run_dir / "checkpoints/last.ckpt").stat().st_ino


@V1
def test_resumable_run_uploads_its_attempt_to_the_v1_datastore(tmp_path):
    args, run_dir = resumable_run(tmp_path)
    plan, _ = build_plan(args, Settings.from_section({"sdk": "v1", "compute": "gpu-cluster"}))
    path = f"snakeddp/resume/base/{sha256_file(run_dir / 'checkpoints/last.ckpt')[:16]}"
    assert spec_v1().uploads(plan)[1] == (plan.resume_dir, path)
    assert spec_v1().build(plan).run_config.data_references["resume"].path_on_data_store == path


def test_checkpoints_of_another_config_are_not_resumed(tmp_path):
    _, _, _, manifest = make_spec(tmp_path, "v2")
    run_dir = tmp_path / "results/runs/base"
    runstate.prepare(run_dir, "another-key")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    args = Namespace(config=run_dir / "run.yaml", run_dir=run_dir, data=manifest, environment_record=None)
    plan, _ = build_plan(args, Settings.from_section({"compute": "gpu-cluster"}))
    assert plan.resume_dir is None and "resume" not in load_job(submit.write_spec(plan)).inputs


def test_environment_sources(tmp_path):
    context = tmp_path / "docker"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04\n")
    env = {"source": "dockerfile", "dockerfile": str(context / "Dockerfile")}
    _, _, spec, _ = make_spec(tmp_path / "a", "v2", environment=env)
    build = load_job(spec).environment.build
    assert (spec.parent / build.path).resolve() == context and build.dockerfile_path == "Dockerfile"
    env = {"source": "registered", "registered": "azureml:my-env:3"}
    _, _, spec, _ = make_spec(tmp_path / "b", "v2", environment=env)
    assert yaml.safe_load(spec.read_text())["environment"] == "azureml:my-env:3"
    load_job(spec)
    with pytest.raises(AzureMLError, match="source=dockerfile needs azureml.sdk: v2"):
        make_spec(tmp_path / "d", "v1", environment={"source": "dockerfile", "dockerfile": str(context / "Dockerfile")})
    with pytest.raises(AzureMLError, match="registered is not set"):
        make_spec(tmp_path / "e", "v2", environment={"source": "registered"})
    with pytest.raises(AzureMLError, match=r"azureml.environment.requirements: .*missing.lock does not exist"):
        make_spec(tmp_path / "f", "v2", environment={"requirements": "envs/missing.lock"})


@V1
def test_a_registered_environment_in_v1(tmp_path):
    _, _, spec, _ = make_spec(tmp_path, "v1", environment={"source": "registered", "registered": "azureml:my-env:3"})
    assert (spec_v1().load(spec).environment.name, spec_v1().load(spec).environment.version) == ("my-env", "3")


DATASTORE_URI = "azureml://datastores/projectstore/paths/datasets/synthetic"


def test_existing_datastore_folder_is_used_as_is(tmp_path):
    _, _, spec, _ = make_spec(tmp_path, "v2", data={"uri": DATASTORE_URI, "mode": "download"})
    data = load_job(spec).inputs["data"]
    assert (data.path, data.mode) == (DATASTORE_URI, "download")


@V1
def test_existing_datastore_folder_is_used_as_is_in_v1(tmp_path):
    plan, _, spec, _ = make_spec(tmp_path, "v1", data={"uri": DATASTORE_URI, "mode": "download"})
    reference = spec_v1().load(spec).data_references["data"]
    assert (reference.data_store_name, reference.path_on_data_store, reference.mode) == (
        "projectstore",
        "datasets/synthetic",
        "download",
    )
    assert spec_v1().uploads(plan) == [], "nothing to upload"


def test_launcher_must_match_the_distribution(tmp_path):
    with pytest.raises(AzureMLError, match="set azureml.distribution: mpi"):
        make_spec(tmp_path / "a", "v2", "pytorch", launch={"launcher": "mpirun"})
    with pytest.raises(AzureMLError, match="launch.launcher=torchrun cannot start processes on AzureML"):
        make_spec(tmp_path / "b", "v2", "pytorch", launch={"launcher": "torchrun"})
    plan, _, _, _ = make_spec(tmp_path / "c", "v2", "mpi", launch={"launcher": "mpirun", "master_port": 29600})
    assert plan.launcher == "mpirun" and plan.variables["MASTER_PORT"] == "29600"


def test_environment_record_hash_follows_what_the_image_is_built_from(tmp_path):
    a = staging.environment_record(staging.environment_spec(Settings.from_section({})))
    b = staging.environment_record(staging.environment_spec(Settings.from_section({"environment": {"python": "3.12"}})))
    again = staging.environment_record(staging.environment_spec(Settings.from_section({})))
    assert a["hash"] == again["hash"] != b["hash"]


@V1
def test_switching_sdk_leaves_no_stale_spec(tmp_path):
    make_spec(tmp_path, "v2")
    _, _, spec, _ = make_spec(tmp_path, "v1")
    assert not (spec.parent / "job.yml").exists() and spec.is_file()
    assert Path(spec.parent / "code" / "environment.json").is_file()


def workflow_environment(**sections):
    """What the workflow exports for a config with these sections (as snakeddp.workflow.plan applies it)."""
    return jobenv.settings(config.validate(sections))


@pytest.mark.parametrize("sdk", ["v2", pytest.param("v1", marks=V1)])
def test_only_network_env_reaches_the_job_never_the_submitting_shells(tmp_path, sdk):
    # The login node exported its InfiniBand interface; the config asks only for NCCL_DEBUG.
    env = {**workflow_environment(network={"env": {"NCCL_DEBUG": "INFO"}}), "NCCL_SOCKET_IFNAME": "ib0"}
    with mock.patch.dict(os.environ, env):
        _, _, spec, _ = make_spec(tmp_path, sdk)
    variables = load_job(spec).environment_variables if sdk == "v2" else spec_v1().load(spec).environment_variables
    assert variables["NCCL_DEBUG"] == "INFO"
    assert "NCCL_SOCKET_IFNAME" not in variables


def test_shm_size_has_a_default_for_gpus_and_is_configurable(tmp_path):
    _, _, spec, _ = make_spec(tmp_path / "a", "v2")
    assert load_job(spec).resources.shm_size == "16g"
    _, _, spec, _ = make_spec(tmp_path / "b", "v2", shm_size="64g")
    assert load_job(spec).resources.shm_size == "64g"
    with pytest.raises(config.ConfigError, match="azureml.shm_size"):
        Settings.from_section({"shm_size": "16 GB"})


@V1
def test_shm_size_reaches_v1s_docker_settings(tmp_path):
    _, _, runconfig, _ = make_spec(tmp_path, "v1", shm_size="64g")
    assert spec_v1().load(runconfig).docker.shm_size == "64g"


@V1
@pytest.mark.parametrize(("declared", "backend"), [("gpu", "nccl"), ("cpu", "gloo")])
def test_auto_accelerator_is_what_the_profile_declares(tmp_path, declared, backend):
    env = workflow_environment(site={"accelerator": declared})
    with mock.patch.dict(os.environ, env):
        plan, _, runconfig, _ = make_spec(tmp_path, "v1", "pytorch", 1, 2, launch={"accelerator": "auto"})
    assert plan.accelerator == declared
    assert spec_v1().load(runconfig).pytorch.communication_backend.lower() == backend
    # Every rank resolves auto again from the same declaration, so the job carries it.
    assert spec_v1().load(runconfig).environment_variables["SNAKEDDP_SITE"] == env["SNAKEDDP_SITE"]


def test_auto_accelerator_without_a_declaration_is_refused_before_a_spec_is_written(tmp_path):
    env = workflow_environment()
    with mock.patch.dict(os.environ, env), pytest.raises(SiteError, match="site.accelerator.*HINT: declare it"):
        make_spec(tmp_path, "v2", launch={"accelerator": "auto"})
    assert not (tmp_path / "results/runs/base/azureml/job.yml").exists()


@pytest.mark.parametrize("sdk", ["v2", pytest.param("v1", marks=V1)])
def test_the_image_environment_installs_the_torch_build_environment_cuda_names(tmp_path, sdk, hashed):
    build_lock = hashed.parent / "requirements-torch-12.6.lock"
    with mock.patch.dict(os.environ, workflow_environment(environment={"cuda": "12.6"})):
        plan, _, spec, _ = make_spec(tmp_path, sdk, environment={"requirements": str(hashed)})
    index = "--extra-index-url https://download.pytorch.org/whl/cu126"
    own = [pin.requirement() for pin in read_lock(build_lock).pins.values()]
    assert any(line.startswith("torch==2.13.0+cu126 --hash=sha256:") for line in own)
    expected = [index, *LOCK_PINS[: -len(read_lock(CHECKOUT / "envs/requirements-torch-13.0.lock").pins)], *own]
    if sdk == "v2":
        environment = load_job(spec).environment
        pip, image = environment.conda_file["dependencies"][-1]["pip"], environment.image
    else:
        environment = spec_v1().load(spec).environment
        conda = environment.python.conda_dependencies
        pip = [*conda.pip_options, *conda.pip_packages]  # azureml-core reads the index as a pip option
        image = environment.docker.base_image
    assert pip == expected
    assert image == CUDA12_IMAGE, "the default base image follows the build: CUDA 12 for the 12.6 build"
    default = staging.environment_record(staging.environment_spec(Settings.from_section({})))
    assert staging.environment_record(plan.environment)["hash"] != default["hash"], "another build resumes nothing"


@pytest.mark.parametrize("sdk", ["v2", pytest.param("v1", marks=V1)])
def test_a_torch_build_whose_lock_has_no_hashes_is_refused_before_any_spec(tmp_path, sdk):
    """As where PyTorch's index did not answer tools/lock.sh: the build's lock says so and holds no torch."""
    envs = hashed_envs(tmp_path / "envs")
    unhashed(envs, "12.6")
    core = envs / "requirements.lock"
    with (
        mock.patch.dict(os.environ, workflow_environment(environment={"cuda": "12.6"})),
        pytest.raises(AzureMLError, match=r'environment.cuda "12.6": .* has no hashes .*HINT: run tools/lock.sh'),
    ):
        make_spec(tmp_path, sdk, environment={"requirements": str(core)})
    assert not (tmp_path / "results/runs/base/azureml/job.yml").exists()


def test_a_dockerfile_environment_cannot_take_another_torch_build(tmp_path):
    with pytest.raises(AzureMLError, match="environment.cuda=cpu with azureml.environment.source=dockerfile.*HINT"):
        staging.environment_spec(Settings.from_section({"environment": {"source": "dockerfile"}}), "cpu")


@pytest.mark.parametrize("sdk", ["v2", pytest.param("v1", marks=V1)])
@pytest.mark.parametrize(
    ("cuda", "image"), [("13.0", DEFAULT_IMAGE), ("13.2", DEFAULT_IMAGE), ("12.6", CUDA12_IMAGE), ("cpu", CPU_IMAGE)]
)
def test_the_default_base_image_is_of_the_builds_cuda_major(tmp_path, sdk, cuda, image, hashed):
    assert images.default_image(torch_build(cuda)) == image
    with mock.patch.dict(os.environ, workflow_environment(environment={"cuda": cuda})):
        _, _, spec, _ = make_spec(tmp_path, sdk, environment={"requirements": str(hashed)})
    written = load_job(spec).environment.image if sdk == "v2" else spec_v1().load(spec).environment.docker.base_image
    assert written == image


@pytest.mark.parametrize("sdk", ["v2", pytest.param("v1", marks=V1)])
def test_a_base_image_of_another_cuda_major_is_refused_before_anything_is_staged(tmp_path, sdk, hashed):
    # The old default (CUDA 12.6) with the default build (CUDA 13.0): nodes with a CUDA 12 driver would
    # start it, and torch's CUDA 13 wheel would see no GPU there.
    with pytest.raises(AzureMLError) as refused:
        make_spec(tmp_path, sdk, environment={"image": CUDA12_IMAGE})
    message = str(refused.value)
    assert "\n" not in message and message.count("HINT:") == 1
    assert f"azureml.environment.image={CUDA12_IMAGE} is a CUDA 12.6 image" in message
    assert "environment.cuda=13.0 installs torch's CUDA 13 build (NVIDIA driver 580 or newer)" in message
    assert f"a CUDA 13 image such as {DEFAULT_IMAGE}" in message
    # The build that keeps the image is offered only where this checkout's lock of it has hashes (it installs).
    keep = 'environment.cuda: "12.6"' if cuda_locked("12.6") else 'environment.cuda "12.6" would keep this image once'
    assert keep in message, message
    assert not (tmp_path / "results/runs/base/azureml").exists(), "nothing staged, so nothing to upload"
    # The same image with the build it was made for is written as configured, and validated by the SDK.
    with mock.patch.dict(os.environ, workflow_environment(environment={"cuda": "12.6"})):
        agreed = {"image": CUDA12_IMAGE, "requirements": str(hashed)}
        _, _, spec, _ = make_spec(tmp_path / "agreed", sdk, environment=agreed)
    written = load_job(spec).environment.image if sdk == "v2" else spec_v1().load(spec).environment.docker.base_image
    assert written == CUDA12_IMAGE


def test_an_image_whose_name_says_no_cuda_is_used_as_configured(tmp_path):
    image = "myregistry.azurecr.io/team/trainer:2026-05-01"
    _, _, spec, _ = make_spec(tmp_path, "v2", environment={"image": image})
    assert load_job(spec).environment.image == image
