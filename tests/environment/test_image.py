"""Building the GPU image: which engine, which tag, and a clear answer when there is no engine."""

from __future__ import annotations

import shutil

import pytest

from snakeddp.environment.image import ImageBuildError, build_command, default_tag, find_engine, image_tag
from tests.helpers import REPO

LOCK = REPO / "envs" / "requirements.lock"


def test_the_default_tag_names_snakeddp_and_torch():
    assert default_tag(LOCK) == "snakeddp:0.1.0-torch2.13.0"
    assert image_tag(None, LOCK) == "snakeddp:0.1.0-torch2.13.0"


def test_a_configured_image_is_the_tag():
    assert image_tag("docker://ghcr.io/org/snakeddp:0.1.0", LOCK) == "ghcr.io/org/snakeddp:0.1.0"


@pytest.mark.parametrize("image", ["snakeddp.sif", f"docker://ghcr.io/org/snakeddp@sha256:{'0' * 64}", "oras://x/y:1"])
def test_an_image_that_cannot_be_a_tag_is_refused(image):
    with pytest.raises(ImageBuildError, match="HINT"):
        image_tag(image, LOCK)


def test_the_build_command_is_an_argument_list():
    command = build_command("/usr/bin/docker", REPO / "envs" / "Dockerfile", REPO, "snakeddp:0.1.0-torch2.13.0", "ab12")
    assert command[:2] == ["/usr/bin/docker", "build"]
    assert command[command.index("--tag") + 1] == "snakeddp:0.1.0-torch2.13.0"
    assert command[-1] == str(REPO)
    assert not any(arg.startswith("TORCH_INDEX_URL=") for arg in command), "the Dockerfile's default is PyPI's build"


def test_another_torch_build_is_a_build_argument_and_a_tag_suffix():
    assert default_tag(LOCK, "12.6") == "snakeddp:0.1.0-torch2.13.0-cu126"
    assert image_tag(None, LOCK, "cpu") == "snakeddp:0.1.0-torch2.13.0-cpu"
    command = build_command("docker", REPO / "envs" / "Dockerfile", REPO, "t", "ab12", cuda="12.6")
    argument = command[command.index("--build-arg") + 1]
    assert argument == "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126"
    assert "io.snakeddp.torch-build=12.6" in command


def test_no_engine_on_path_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ImageBuildError) as error:
        find_engine()
    message = str(error.value)
    assert "docker: not installed" in message and "podman: not installed" in message
    assert "HINT" in message


def test_an_engine_that_cannot_reach_its_daemon_is_a_clear_error(tmp_path, monkeypatch):
    """The real docker CLI, pointed at a socket where no daemon listens."""
    docker = shutil.which("docker")
    assert docker, "the docker CLI is part of this machine's image"
    monkeypatch.setenv("PATH", str(tmp_path) + ":" + str(shutil.which("docker")).rsplit("/", 1)[0])
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(ImageBuildError) as error:
        find_engine(("docker",))
    assert "docker: installed, but `docker info` fails:" in str(error.value)
    assert "HINT: start the Docker daemon" in str(error.value)


def test_the_dockerfile_names_its_base_images_in_full():
    """Podman resolves no short names ("short-name did not resolve to an alias"): each image the
    Dockerfile starts from names its registry."""
    lines = (REPO / "envs" / "Dockerfile").read_text().splitlines()
    defaults = {
        line.split()[1].split("=")[0]: line.split("=", 1)[1]
        for line in lines
        if line.startswith("ARG ") and "=" in line
    }
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases
    for base in bases:
        image = defaults.get(base.strip("${}"), base)
        registry = image.split("/")[0]
        assert "." in registry and "/" in image, f"{image}: name its registry (docker.io/..., mcr.microsoft.com/...)"
