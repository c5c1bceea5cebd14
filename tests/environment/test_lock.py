"""The locks, and how an installed environment is compared with them."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from snakeddp.environment.lock import Lock, LockError, Pin, changed, compare, installed, read_lock, requirement_closure
from tests.helpers import REPO, subprocess_env

CORE_LOCK = REPO / "envs" / "requirements.lock"
DEV_LOCK = REPO / "envs" / "requirements-dev.lock"


def _pins(lines: list[str]) -> dict[str, str]:
    """name -> version of pip freeze's lines (``name==version``, or ``name @ URL`` for a wheel installed by its
    file, whose version its metadata says), names lower-cased as pip compares them."""
    pins = {}
    for line in lines:
        line = line.strip()
        if " @ " in line:
            name = line.partition(" @ ")[0]
            pins[canonicalize_name(name)] = importlib.metadata.version(name)
        elif line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_the_venv_holds_exactly_the_locked_versions():
    """What tools/setup.sh --dev installed (this interpreter's venv) is the two locks, nothing more
    or less; torch's local build label (+cpu) is the machine's choice and is ignored."""
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    have = {name: version.split("+")[0] for name, version in _pins(freeze).items()}
    want = {key: pin.version for key, pin in read_lock(CORE_LOCK, DEV_LOCK).pins.items()}
    assert len(want) > 150
    names = set(have) | set(want)
    differences = {name: (have.get(name), want.get(name)) for name in names if have.get(name) != want.get(name)}
    assert differences == {}, "installed vs locked; HINT: rerun tools/setup.sh --dev"


@pytest.mark.parametrize("module", ["torch", "lightning", "snakemake", "pandas", "snakeddp.train"])
def test_the_venv_holds_bytecode_for_what_the_processes_import(module):
    """tools/setup.sh compiles at install time: where PYTHONDONTWRITEBYTECODE=1 is set (CI, containers)
    no import writes a .pyc, and every process compiled these packages from source again."""
    source = importlib.util.find_spec(module).origin
    assert Path(importlib.util.cache_from_source(source)).is_file(), f"no bytecode for {source}"


def test_installed_reads_the_same_names_and_versions_as_the_full_metadata():
    """installed() parses only the metadata headers; what it finds must be what the whole files say."""
    full = {}
    for dist in importlib.metadata.distributions(path=sys.path):
        full.setdefault(canonicalize_name(dist.metadata["Name"]), (dist.metadata["Name"], dist.version))
    assert len(full) > 50
    assert {key: (pin.name, pin.version) for key, pin in installed(sys.path).items()} == full


def test_read_lock_gives_pins_and_python():
    lock = read_lock(CORE_LOCK)
    assert lock.python == "3.11"
    assert lock.version("torch") == "2.13.0"
    assert lock.version("PyYAML") == lock.version("pyyaml") == "6.0.4"


def test_read_lock_gives_every_entrys_hashes_and_index_as_uv_writes_them(tmp_path):
    lock = read_lock(CORE_LOCK)
    assert all(pin.hashes for pin in lock.pins.values()), "every entry is hashed"
    (certifi,) = lock.pins["certifi"].hashes
    assert len(certifi) == 64 and lock.pins["certifi"].index == "https://pypi.org/simple"
    written = tmp_path / "uv.txt"
    b, a = "b" * 64, "a" * 64
    written.write_text(
        f"# Python 3.11.7\nsix==1.16.0 \\\n    --hash=sha256:{b} \\\n    --hash=sha256:{a}\n"
        "    # from https://pypi.org/simple\nidna==3.10\n"
    )
    six = read_lock(written).pins["six"]
    assert six == Pin("six", "1.16.0", ("a" * 64, "b" * 64), "https://pypi.org/simple")
    assert six.requirement() == f"six==1.16.0 --hash=sha256:{'a' * 64} --hash=sha256:{'b' * 64}"
    assert read_lock(written).pins["idna"] == Pin("idna", "3.10")


def test_changed_names_the_installed_packages_whose_entry_moved_since_they_were_verified(tmp_path):
    record = tmp_path / "verified"
    record.write_text(f"six==1.16.0 --hash=sha256:{'a' * 64}\nidna==3.10 --hash=sha256:{'c' * 64}\n")
    now = tmp_path / "lock"
    entries = ("six==1.16.0", "b"), ("idna==3.10", "c"), ("new==1.0", "d")
    now.write_text("".join(f"{pin} --hash=sha256:{char * 64}\n" for pin, char in entries))
    present = {"six": Pin("six", "1.16.0"), "idna": Pin("idna", "3.10"), "new": Pin("new", "1.0")}
    assert changed(record, read_lock(now), present) == ["new", "six"], "a new entry and a changed hash"
    assert changed(tmp_path / "none", read_lock(now), {"six": present["six"]}) == ["six"], "no record: all installed"


def test_a_lock_line_that_is_not_an_exact_pin_is_an_error(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# Python 3.11.7, x86_64.\nnumpy==2.4.6\nlightning>=2.6\n")
    with pytest.raises(LockError, match=r"requirements.lock:3: 'lightning>=2.6' is not an exact pin.*HINT"):
        read_lock(lock)


def test_compare_names_each_kind_of_difference():
    lock = Lock({"numpy": Pin("numpy", "2.4.6"), "torch": Pin("torch", "2.13.0"), "pandas": Pin("pandas", "3.1.1")})
    present = {
        "numpy": Pin("numpy", "2.4.5"),
        "torch": Pin("torch", "2.13.0+cpu"),
        "requests": Pin("requests", "2.34.2"),
        "pip": Pin("pip", "26.0"),
    }
    result = compare(present, lock)
    assert result.mismatched == [("numpy", "2.4.5", "2.4.6")]
    assert result.missing == [Pin("pandas", "3.1.1")]
    assert result.extra == [Pin("requests", "2.34.2")]
    assert not result.ok


def test_a_local_label_in_the_lock_must_match_exactly():
    lock = Lock({"torch": Pin("torch", "2.13.0+cu130")})
    assert compare({"torch": Pin("torch", "2.13.0+cpu")}, lock).mismatched == [("torch", "2.13.0+cpu", "2.13.0+cu130")]


def test_optional_lock_packages_may_be_absent_but_must_match():
    lock = Lock({"numpy": Pin("numpy", "2.4.6")})
    optional = Lock({"pytest": Pin("pytest", "9.2.0"), "ruff": Pin("ruff", "0.17.6")})
    present = {"numpy": Pin("numpy", "2.4.6"), "pytest": Pin("pytest", "9.1.0")}
    result = compare(present, lock, optional)
    assert result.mismatched == [("pytest", "9.1.0", "9.2.0")]
    assert result.missing == [] and result.extra == []


def _dist(site: Path, name: str, version: str, requires: list[str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_requirement_closure_evaluates_markers_and_extras(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "app", "1.0", ["lib[fast]>=1", "winonly; sys_platform == 'win32'", "docs; extra == 'docs'"])
    _dist(site, "lib", "1.0", ["base", "speedup; extra == 'fast'", "never; extra == 'other'"])
    for name in ("base", "speedup", "winonly", "docs", "never"):
        _dist(site, name, "1.0", [])
    present = installed([str(site)])
    assert requirement_closure(["app"], present, [str(site)]) == {"app", "lib", "base", "speedup"}


def test_a_closure_read_again_after_an_install_or_a_removal_sees_it(tmp_path):
    """The requirements are read once per listing of the directories: a distribution installed or removed since
    is seen by the next closure in the same process."""
    site = tmp_path / "site-packages"
    _dist(site, "app", "1.0", ["lib"])
    _dist(site, "lib", "1.0", [])
    assert requirement_closure(["app"], installed([str(site)]), [str(site)]) == {"app", "lib"}
    for info in site.glob("lib-1.0.dist-info"):
        subprocess.run(["rm", "-r", info], check=True)
    _dist(site, "lib", "2.0", ["base"])
    _dist(site, "base", "1.0", [])
    assert requirement_closure(["app"], installed([str(site)]), [str(site)]) == {"app", "lib", "base"}


def test_the_torch_build_brings_its_own_runtime_wheels(tmp_path):
    """A CUDA build's nvidia wheels are not in the lock, yet belong to the locked torch."""
    site = tmp_path / "site-packages"
    _dist(site, "torch", "2.13.0+cu130", ["filelock", "nvidia-nccl-cu13==2.29.7; platform_system == 'Linux'"])
    _dist(site, "filelock", "4.2.11", [])
    _dist(site, "nvidia-nccl-cu13", "2.29.7", [])
    _dist(site, "stray", "1.0", [])
    lock = Lock({"torch": Pin("torch", "2.13.0"), "filelock": Pin("filelock", "4.2.11")})
    result = compare(installed([str(site)]), lock, paths=[str(site)])
    assert result.accelerator == [Pin("nvidia-nccl-cu13", "2.29.7")]
    assert result.extra == [Pin("stray", "1.0")]


def test_verify_fails_when_the_lock_moves(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text(CORE_LOCK.read_text().replace("\nnumpy==2.4.6 \\\n", "\nnumpy==2.4.5 \\\n"))
    command = [sys.executable, "-m", "snakeddp.environment.lock", "verify", str(lock), "--optional", str(DEV_LOCK)]
    done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), check=False)
    assert done.returncode == 1
    assert "numpy: installed 2.4.6, locked 2.4.5" in done.stderr and "HINT" in done.stderr
    command[4] = str(CORE_LOCK)
    done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), check=False)
    assert done.returncode == 0, done.stderr
