"""tools/add.sh and tools/setup.sh in a copy of this checkout with its own venv: a package from PyPI
added with the one documented command reaches the lock, the train stage's conda YAML and a model that
imports it in training; a package that breaks `import lightning.pytorch` is named in one line at
set-up, and the command the line gives takes it out again; a package removed by hand is put back.

The venv starts as set-up makes it from the core lock (tests.checkout.with_core_venv)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import re
import signal
import subprocess
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from bench.venvs import UV
from snakeddp.environment import cooldown
from snakeddp.environment.lock import read_lock
from tests.checkout import copy_of_this_checkout, hint_lines, typed, with_core_venv
from tests.environment.probe_index import PROBE, probe_index
from tests.helpers import as_typed_in_a_terminal, tiny_with

pytestmark = pytest.mark.e2e
USER_MODEL = """
import humanize

from examples.tabular.model import TabularNet


class Net(TabularNet):
    def __init__(self, num_features, num_classes, width):
        super().__init__(num_features, num_classes, width=width, depth=1)
        print("user model: humanize", humanize.__version__, "says", humanize.intword(1_200_000), flush=True)
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    root = copy_of_this_checkout(tmp_path_factory.mktemp("add") / "snakeddp")
    with_core_venv(root)
    return root


def test_a_denied_release_is_refused_before_anything_changes_naming_its_advisory(checkout):
    """lightning 2.6.5 is still served by PyPI (checked 2026-11-26), and every release before 2.6.6 runs code in
    load_from_checkpoint: tools/add.sh refuses it in one line, with the first good version."""
    envs = {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()}
    refused = typed(checkout, "tools/add.sh", "lightning==2.6.5")
    assert refused.returncode == 2 and hint_lines(refused) == [
        "add: lightning 2.6.5 is denied by envs/denied.toml (GHSA-qqmf-gpg7-g8gw (CVE-2026-58659): code execution "
        "in load_from_checkpoint, fixed in 2.6.6); the first good version is 2.6.6. HINT: tools/add.sh lightning==2.6.6"
    ], refused.stdout + refused.stderr
    assert {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()} == envs


def test_a_release_published_today_is_refused_naming_the_cooldown_and_nothing_changes(checkout, tmp_path):
    """cooldown-probe 1.1 was uploaded an hour ago to an index of the test's own (PyPI behind it for the rest):
    tools/add.sh refuses it in one line naming the cooldown, and envs/ is as it was."""
    envs = {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()}
    with probe_index(tmp_path) as index:
        refused = typed(checkout, "tools/add.sh", f"{PROBE}==1.1", UV_INDEX=index)
    published = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%d")
    lines = (refused.stdout + refused.stderr).strip().splitlines()
    assert refused.returncode == 1 and lines[-1:] == hint_lines(refused), refused.stdout + refused.stderr
    assert len(hint_lines(refused)) == 1 and "Resolved" not in refused.stderr and "cause:" not in refused.stderr
    assert hint_lines(refused)[0].startswith(f"lock: {PROBE} 1.1 was published {published} ")
    assert "inside the 7-day cooldown on new releases (envs/cooldown.toml" in hint_lines(refused)[0]
    assert {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()} == envs


def test_a_name_the_index_does_not_know_is_said_so_in_one_line_and_nothing_changes(checkout):
    """A typo was told "change the pin uv names, or tools/lock.sh --upgrade", which fails alike."""
    envs = {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()}
    # A narrow terminal: uv wraps its reason across lines, as it did in CI.
    refused = typed(checkout, "tools/add.sh", "humanizzze-no-such-package", COLUMNS="60")
    assert refused.returncode == 1 and hint_lines(refused) == [
        'lock: the package index has no package named humanizzze-no-such-package (uv: "humanizzze-no-such-package '
        'was not found in the package registry"); the locks are unchanged. HINT: check the name (its page is '
        "https://pypi.org/project/humanizzze-no-such-package/ if it exists), then run tools/add.sh with it again"
    ], refused.stdout + refused.stderr
    assert {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()} == envs


def test_ctrl_c_while_adding_leaves_envs_as_it_was_and_says_so_in_one_line(checkout):
    """Ctrl-C during the re-lock left envs/requirements.in edited and the locks not, which make lint's check did not
    notice. The terminal's Ctrl-C: SIGINT to the command's process group, once the .in file is edited."""
    envs = {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()}
    environ = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    environ.update(PATH=f"{checkout / '.venv' / 'bin'}:/usr/bin:/bin", XDG_CONFIG_HOME=str(checkout.parent / "config"))
    adding = subprocess.Popen(
        ["tools/add.sh", "humanize"], cwd=checkout, env=environ, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_typed_in_a_terminal,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while (checkout / "envs/requirements.in").read_bytes() == envs["requirements.in"]:
        assert adding.poll() is None and time.monotonic() < deadline, "tools/add.sh never edited requirements.in"
        time.sleep(0.05)
    time.sleep(0.5)  # into the re-lock
    os.killpg(adding.pid, signal.SIGINT)
    stdout, stderr = adding.communicate(timeout=60)
    assert adding.returncode == 130, stdout + stderr
    assert hint_lines(subprocess.CompletedProcess([], 130, stdout, stderr)) == [
        "add: stopped before the locks were written; envs/ is as it was. HINT: run the same tools/add.sh command again"
    ], stdout + stderr
    assert {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()} == envs


# The HINT of the test above, followed (with a second package).
def test_a_package_added_with_one_command_is_locked_staged_and_imported_by_the_model_in_training(checkout):
    # With the HINT of the denied release above followed: lightning==2.6.6 pinned as it is locked.
    added = typed(checkout, "tools/add.sh", "humanize", "lightning==2.6.6")
    assert added.returncode == 0, added.stdout + added.stderr
    assert read_lock(checkout / "envs/requirements.lock").version("lightning") == "2.6.6"
    assert "lightning==2.6.6" in (checkout / "envs/requirements.in").read_text().splitlines()
    version = read_lock(checkout / "envs/requirements.lock").version("humanize")
    assert version, "humanize is in the core lock"
    assert f"humanize=={version}  # stages: train" in (checkout / "envs/requirements.in").read_text().splitlines()
    train = yaml.safe_load((checkout / "envs/train.yaml").read_text())["dependencies"][-1]["pip"]
    data = yaml.safe_load((checkout / "envs/data.yaml").read_text())["dependencies"][-1]["pip"]
    assert any(pin.startswith(f"humanize=={version} --hash=sha256:") for pin in train), "hashed, as pip requires"
    assert not any(pin.startswith("humanize") for pin in data)
    assert "imports work:" in added.stdout and "humanize" in added.stdout.split("imports work:")[-1]
    # The YAMLs agree with the lock, read in the venv that has the package (the Dockerfile's check
    # needs the dev tools, and it installs the lock itself).
    stages = (
        "from snakeddp.environment import files\n"
        "lock = files.read_lock(files.ENVS / 'requirements.lock')\n"
        "print([files.check_stage(s, files.ENVS / (s + '.yaml'), lock) for s in files.STAGE_PACKAGES])"
    )
    checked = typed(checkout, ".venv/bin/python", "-c", stages)
    assert checked.stdout.strip() == "[[], [], []]", checked.stdout + checked.stderr

    (checkout / "user_humanize.py").write_text(USER_MODEL)
    config = tiny_with({"model": {"target": "user_humanize:Net", "kwargs": {"width": 16}}})
    config["trainer"]["max_epochs"] = 1
    (checkout / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    trained = typed(checkout, "snakemake", "--profile", "profiles/local", "--until", "train")
    assert trained.returncode == 0, trained.stdout + trained.stderr
    (log,) = [log for log in (checkout / "logs" / "train").glob("*.log") if not log.name.endswith(".config.log")]
    assert f"user model: humanize {version} says 1.2 million" in log.read_text()
    record = (checkout / "results" / "envs" / "train.json").read_text()
    assert "humanize" in record and version in record


def test_a_package_removed_by_hand_is_reported_in_one_line_and_put_back(checkout):
    uninstall = [UV, "pip", "uninstall", "--quiet", "--python", checkout / ".venv/bin/python", "tabulate"]
    typed(checkout, "tools/setup.sh")  # the venv as set-up leaves it
    built = editable_metadata(checkout).stat().st_mtime_ns
    subprocess.run(uninstall, check=True)
    repaired = typed(checkout, "tools/setup.sh")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    said = [line for line in repaired.stdout.splitlines() if "changed since it was set up" in line]
    assert len(said) == 1 and "tabulate: locked 0.10.0, not installed" in said[0], repaired.stdout
    assert typed(checkout, ".venv/bin/python", "-c", "import tabulate").returncode == 0
    # The sync took snakeddp out too (it is in no lock): its editable install is put back as it was, not built again.
    assert editable_metadata(checkout).stat().st_mtime_ns == built
    again = typed(checkout, "tools/setup.sh")
    assert again.returncode == 0 and "changed" not in again.stdout


def test_an_sdist_read_online_again_is_taken_from_uvs_cache_where_the_user_has_no_uv_config(checkout, tmp_path):
    """Through a proxy that strips PyPI's cache headers (this machine's), uv downloaded each file an online resolution
    read again, and an sdist downloaded again is a new cache entry, without the wheel built from the last one: each
    re-lock built pyspark again once it was locked. tools/uv.sh gives uv tools/pypi.toml (PyPI's own headers) where
    the user's uv reads no configuration of its own, and leaves one of theirs alone."""
    said = 'source tools/progress.sh; source tools/uv.sh; echo "${UV_CONFIG_FILE:-none}"'
    assert typed(checkout, "bash", "-c", said).stdout.strip() == str(checkout / "tools/pypi.toml")
    own = tmp_path / "config" / "uv" / "uv.toml"
    own.parent.mkdir(parents=True)
    own.write_text('index-strategy = "first-index"\n')
    assert typed(checkout, "bash", "-c", said, XDG_CONFIG_HOME=str(own.parent.parent)).stdout.strip() == "none"
    # connection-pool 0.0.3: an sdist only (3.8 KB), resolved online twice into a cache of the test's own.
    (tmp_path / "pool.in").write_text("connection-pool==0.0.3\n")
    uv = 'source tools/progress.sh; source tools/uv.sh; "$uv"'
    resolve = f"{uv} pip compile --quiet --python .venv/bin/python {tmp_path}/pool.in"
    for _ in range(2):
        done = typed(checkout, "bash", "-c", resolve, UV_CACHE_DIR=str(tmp_path / "cache"))
        assert done.returncode == 0 and "connection-pool==0.0.3" in done.stdout, done.stdout + done.stderr
    assert len(list((tmp_path / "cache").glob("sdists-*/pypi/connection-pool/0.0.3/*/"))) == 1


def editable_metadata(checkout: Path) -> Path:
    """The METADATA of the checkout's editable install of snakeddp (the one dist-info of it in the venv)."""
    (metadata,) = (checkout / ".venv/lib/python3.11/site-packages").glob("snakeddp-*.dist-info/METADATA")
    return metadata


def fake_wheel(directory: Path, name: str, version: str, init: str) -> Path:
    """A pure-Python wheel whose package runs ``init`` when imported, built here (no download)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": init,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    record = [f"{path},sha256={digest(text)},{len(text.encode())}" for path, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def test_a_package_that_breaks_lightning_is_named_at_set_up_and_the_hinted_command_removes_it(checkout, tmp_path):
    # PyPI's CUDA torchvision beside the CPU torch raises this from its import, which torchmetrics
    # makes (a torchvision is installed) inside `import lightning.pytorch`. This one is a few bytes
    # with the same name and error, offered beside the index as the machine's own wheels are.
    fake_wheel(
        tmp_path, "torchvision", "0.0.1+broken", 'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    links = {"UV_FIND_LINKS": f"{tmp_path},{os.environ.get('PIP_FIND_LINKS', '')}".rstrip(",")}
    broken = typed(checkout, "tools/add.sh", "torchvision==0.0.1+broken", **links)
    assert broken.returncode != 0
    lines = hint_lines(broken)
    assert len(lines) == 1, broken.stdout + broken.stderr
    line = lines[0]
    assert line.startswith("setup: import lightning.pytorch fails in package torchvision 0.0.1+broken"), line
    assert "torchmetrics" in line and "RuntimeError: operator torchvision::nms does not exist" in line, line
    assert "tools/add.sh --remove torchvision" in line

    removed = typed(checkout, "tools/add.sh", "--remove", "torchvision", **links)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert read_lock(checkout / "envs/requirements.lock").version("torchvision") is None
    assert "torchvision" not in (checkout / "envs/requirements.in").read_text()
    (site,) = (checkout / ".venv/lib").glob("python3*/site-packages")
    assert not list(importlib.metadata.distributions(name="torchvision", path=[str(site)])), "uninstalled"
    # import lightning.pytorch works again: the set-up the command ends with imported it in the venv, the same
    # check that named the broken torchvision above (a Python started here to import it again: 4 s of CPU).
    (worked,) = [line for line in removed.stdout.splitlines() if line.startswith("setup: imports work: ")]
    assert "lightning.pytorch" in worked.removeprefix("setup: imports work: ").split(", "), worked


def test_a_lock_with_an_altered_hash_stops_make_run_before_anything_is_installed(checkout):
    """certifi has one file on PyPI (a wheel), so one hash: altered, `make run`'s set-up stops in one line naming
    the package, the expected and the found digest, and installs nothing, not even a package the venv lacks;
    the lock written again (the HINT's tools/lock.sh) sets up."""
    assert typed(checkout, "tools/setup.sh").returncode == 0  # the venv as set-up leaves it
    lock = checkout / "envs/requirements.lock"
    written = lock.read_text()
    (good,) = read_lock(lock).pins["certifi"].hashes
    altered = good[:-1] + ("0" if good[-1] != "0" else "1")
    lock.write_text(written.replace(good, altered))
    subprocess.run(
        [UV, "pip", "uninstall", "--quiet", "--python", checkout / ".venv/bin/python", "tabulate"], check=True
    )
    site = checkout / ".venv/lib/python3.11/site-packages"
    before = sorted(path.name for path in site.iterdir())
    stopped = typed(checkout, "make", "run")
    lines = hint_lines(stopped)
    assert stopped.returncode != 0 and lines == [
        f"setup: certifi==2026.10.19.post1: envs/requirements.lock expects sha256:{altered}, and the file uv got has "
        f"sha256:{good}: nothing was installed. HINT: if the lock is right, the file is not the one it was made from "
        "(a mirror or a cache: uv cache clean certifi fetches it again); if the lock was changed, restore it "
        "(git checkout envs/) or write it again with tools/lock.sh"
    ], stopped.stdout + stopped.stderr
    assert sorted(path.name for path in site.iterdir()) == before, "nothing was installed or removed"
    assert "snakemake" not in stopped.stdout.split("HINT:")[-1], "the workflow did not start"
    relocked = typed(checkout, "tools/lock.sh")
    assert relocked.returncode == 0, relocked.stdout + relocked.stderr
    # Written again: certifi's hash is the index's, every version as it was, and the cooldown's cutoff today's (the
    # same bytes on the day the lock was written; the cutoff moves at midnight UTC).
    before = checkout.parent / "requirements-before.lock"
    before.write_text(written)
    assert read_lock(lock).pins["certifi"].hashes == (good,)
    assert {k: p.version for k, p in read_lock(lock).pins.items()} == {
        k: p.version for k, p in read_lock(before).pins.items()
    }
    header = cooldown.load(checkout / "envs/cooldown.toml").header(datetime.now(UTC))
    assert header in lock.read_text().splitlines()
    # Again where nothing reaches the index (unshare -n: a cluster's compute node): the .in files and the old locks
    # decide every package, so each resolution is uv's cache's, the SDK v1's too (it asked the index every time,
    # for the packages where its lock and the dev lock differ: cryptography, pathspec).
    locks = sorted((checkout / "envs").glob("requirements*.lock"))
    pins = {path.name: read_lock(path).pins for path in locks}
    offline = typed(checkout, "unshare", "--net", "tools/lock.sh")
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert {path.name: read_lock(path).pins for path in locks} == pins
    again = typed(checkout, "tools/setup.sh")
    assert again.returncode == 0, again.stdout + again.stderr
    assert typed(checkout, ".venv/bin/python", "-c", "import tabulate").returncode == 0
    # tabulate is back as it was, at the versions the imports last worked with: they are not imported again (2-4 s).
    assert "setup: imports work (nothing they import has changed since they last did)" in again.stdout, again.stdout


def test_a_torch_build_without_hashes_is_refused_in_one_line_and_the_venv_keeps_its_torch(checkout):
    """`tools/setup.sh --cuda 12.6` (the HINT a V100 rank gives): where PyTorch's cu126 index did not answer when
    the locks were written (this machine reaches no index but PyPI), the build has no hashes and nothing of it is
    installed: one line, and the venv keeps its torch and matches the locks again with the next plain set-up."""
    assert typed(checkout, "tools/setup.sh").returncode == 0  # the venv as set-up leaves it
    assert "torch" not in read_lock(checkout / "envs/requirements-torch-12.6.lock").pins
    torch_version = [".venv/bin/python", "-c", "import importlib.metadata as m; print(m.version('torch'))"]
    before = typed(checkout, *torch_version).stdout
    switched = typed(checkout, "tools/setup.sh", "--cuda", "12.6")
    lines = hint_lines(switched)
    assert switched.returncode == 2 and len(lines) == 1, switched.stdout + switched.stderr
    index = "https://download.pytorch.org/whl/cu126"
    assert lines[0].startswith('setup: environment.cuda "12.6": envs/requirements-torch-12.6.lock has no hashes ')
    assert f"HINT: run tools/lock.sh on a machine that reaches {index}" in lines[0]
    assert "installing envs/requirements.lock" not in switched.stdout, "the locks were installed already"
    assert typed(checkout, *torch_version).stdout == before
    again = typed(checkout, "tools/setup.sh")
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    unknown = typed(checkout, "tools/setup.sh", "--cuda", "11.8")
    assert unknown.returncode == 2 and hint_lines(unknown) == [
        'setup: environment.cuda=\'11.8\' names no torch build. HINT: choose one of "13.0", "13.2", "12.6", "cpu" '
        "(docs/environments.md says which GPUs and drivers each serves)."
    ]


def test_snakeddp_is_built_again_when_its_version_changes(checkout):
    """The set-up puts its kept editable install back only while what it was made from is unchanged: after a new
    version (and a sync: a package removed by hand), the venv's snakeddp is the new version, built again."""
    init = checkout / "src/snakeddp/__init__.py"
    old = re.search(r'__version__ = "([^"]+)"', init.read_text())[1]
    init.write_text(init.read_text().replace(f'__version__ = "{old}"', f'__version__ = "{old}.post1"'))
    subprocess.run(
        [UV, "pip", "uninstall", "--quiet", "--python", checkout / ".venv/bin/python", "tabulate"], check=True
    )
    again = typed(checkout, "tools/setup.sh")
    assert again.returncode == 0, again.stdout + again.stderr
    version = [".venv/bin/python", "-c", "import importlib.metadata as m; print(m.version('snakeddp'))"]
    assert typed(checkout, *version).stdout.strip() == f"{old}.post1"
    assert editable_metadata(checkout).parent.name == f"snakeddp-{old}.post1.dist-info"
    # A distribution made anew (and snakeddp's sources changed): what the stages import is imported again.
    assert "setup: imports work: torch, lightning.pytorch" in again.stdout, again.stdout
