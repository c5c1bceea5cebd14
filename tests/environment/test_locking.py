"""How tools/lock.sh writes the locks from uv's outputs: preferences that survive a merge, hashes, torch's builds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from snakeddp.environment import locking
from snakeddp.environment.lock import read_lock
from snakeddp.errors import LockError
from tests.checkout import copy_of_this_checkout, hint_lines, typed
from tests.helpers import REPO

ENVS = REPO / "envs"


def test_a_lock_left_with_conflict_markers_still_gives_what_both_sides_agree_on(tmp_path):
    merged = tmp_path / "requirements.lock"
    merged.write_text(
        "attrs==26.1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
        "<<<<<<< HEAD\nnumpy==2.4.6 \\\n    --hash=sha256:" + "b" * 64 + "\n=======\nnumpy==2.4.5 \\\n"
        "    --hash=sha256:" + "c" * 64 + "\n>>>>>>> theirs\nscikit-learn==1.8.0\ntorch==2.13.0\n"
    )
    assert locking.preferences([merged]) == ["attrs==26.1.0", "scikit-learn==1.8.0"], "numpy afresh, torch never"


def test_one_start_prepares_the_preferences_denials_and_builds_and_refuses_a_denied_pin_in_an_in_file(tmp_path):
    """tools/lock.sh's inputs from one Python start: the old locks as preferences (none with --upgrade), the
    constraints that keep denied releases out, each build's label and index; a denied pin in an .in is named."""
    envs, work = tmp_path / "envs", tmp_path / "work"
    envs.mkdir()
    work.mkdir()
    for name in locking.INS:
        (envs / name).write_text((ENVS / name).read_text())
    for name in (locking.CORE, locking.DEV, "requirements-torch-13.0.lock", "cooldown.toml"):
        (envs / name).write_text((ENVS / name).read_text())
    assert locking.prepare(envs, work, upgrade=False) == []
    # The cooldown's cutoff, for uv and for the locks' headers, from one reading of the clock.
    args = (work / "cooldown-args.txt").read_text().splitlines()
    assert args[0] == "--exclude-newer" and args[1].endswith("T00:00:00Z")
    assert (work / "cooldown-header.txt").read_text().startswith(f"# No release uploaded after {args[1]} ")
    assert (work / "all.txt").read_text() == "\n".join(
        locking.preferences([ENVS / locking.CORE, ENVS / locking.DEV])
    ) + "\n"
    assert (work / "v1-kept.txt").read_text() == "\n", "no SDK v1 lock: no preferences"
    assert (work / "build-13.0.txt").read_text().startswith("cuda-bindings=="), "the build's runtime wheels"
    assert "torch==" not in (work / "build-13.0.txt").read_text()
    assert "lightning>=2.6.6" in (work / "denied.txt").read_text().splitlines()
    assert (work / "builds.txt").read_text().splitlines() == [
        "13.0 - https://pypi.org/simple",
        "13.2 cu132 https://download.pytorch.org/whl/cu132",
        "12.6 cu126 https://download.pytorch.org/whl/cu126",
        "cpu cpu https://download.pytorch.org/whl/cpu",
    ]
    assert locking.main(["prepare", str(envs), str(work), "--upgrade"]) == 0
    assert all((work / name).read_text() == "" for name in ("all.txt", "v1-kept.txt", "build-13.0.txt"))
    (envs / "requirements-dev.in").write_text("lightning==2.6.5\n")
    assert locking.prepare(envs, work, upgrade=False) == [
        f"{envs}/requirements-dev.in: lightning 2.6.5 is denied by envs/denied.toml (GHSA-qqmf-gpg7-g8gw "
        "(CVE-2026-58659): code execution in load_from_checkpoint, fixed in 2.6.6); the first good version is 2.6.6. "
        "HINT: tools/add.sh lightning==2.6.6"
    ]
    assert locking.main(["prepare", str(envs), str(work)]) == 1


def test_an_offline_resolution_is_kept_only_where_the_in_files_and_old_locks_decided_every_package(tmp_path):
    """tools/lock.sh keeps uv's offline answer when nothing was left to choose; a package new to the locks, one
    at another version than any pin allows, or one named without a version sends it to the index."""
    digest = " \\\n    --hash=sha256:" + "a" * 64 + "\n"
    resolved = tmp_path / "all.txt"
    resolved.write_text("".join(f"{pin}{digest}" for pin in ("torch==2.13.0+cpu", "six==1.16.0", "moto==5.2.5")))
    requirements = tmp_path / "requirements.in"
    requirements.write_text("torch==2.13.0\nmoto[s3]==5.2.5  # stages: data\nhumanize  # stages: train\n")
    old = tmp_path / "all.kept"
    old.write_text("six==1.16.0\n")
    assert locking.undecided(resolved, [requirements, old]) == [], "torch's local build, moto's extra, six kept"
    old.write_text("six==1.15.0\n")
    assert locking.undecided(resolved, [requirements, old]) == ["six==1.16.0"], "another version than the lock's"
    resolved.write_text(resolved.read_text() + f"humanize==4.16.0{digest}")
    assert locking.undecided(resolved, [requirements, old]) == ["humanize==4.16.0", "six==1.16.0"], "a bare name"
    assert locking.main(["undecided", str(resolved), "--by", str(requirements), str(old)]) == 1


def test_only_what_the_venv_lacks_as_the_lock_installs_it_goes_into_the_yamls_throwaway_venv(tmp_path):
    """tools/lock.sh reads the stage closures from the venv where it holds a package as the core lock installs it,
    and installs the rest into a throwaway venv: a version from an index is held at that version and without a
    direct_url.json, a find-links wheel (tools/uv.sh's hashed_requirements: `name @ URL`) from that URL."""
    site = tmp_path / "site-packages"

    def dist(name: str, version: str, url: str | None = None) -> None:
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        if url:
            (info / "direct_url.json").write_text(f'{{"url":"{url}","archive_info":{{}}}}')

    wheel = "file:///opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    dist("six", "1.16.0")
    dist("idna", "3.9")
    dist("torch", "2.13.0+cpu", wheel)
    dist("certifi", "2026.1.1", "file:///home/me/certifi-2026.1.1-py3-none-any.whl")
    dist("PyYAML", "6.0.4")
    digest = " \\\n    --hash=sha256:" + "a" * 64 + "\n    # from https://pypi.org/simple\n"
    entries = {
        "six": f"six==1.16.0{digest}",
        "idna": f"idna==3.10{digest}",
        "certifi": f"certifi==2026.1.1{digest}",
        "pyyaml": f"pyyaml==6.0.4{digest}",
        "humanize": f"humanize==4.16.0{digest}",
        "torch": f"torch @ {wheel} --hash=sha256:{'b' * 64}\n",
    }
    requirements = tmp_path / "core-requirements.txt"
    requirements.write_text("# Generated by tools/lock.sh\n" + "".join(entries.values()))
    unheld = locking.unheld(requirements, site, keep=["PyYAML"])
    assert unheld == entries["idna"] + entries["certifi"] + entries["pyyaml"] + entries["humanize"]
    assert [name for name, _ in locking.requirement_entries(unheld)] == ["idna", "certifi", "pyyaml", "humanize"]
    (site / "torch-2.13.0+cpu.dist-info" / "direct_url.json").write_text('{"url":"file:///elsewhere.whl"}')
    assert entries["torch"] in locking.unheld(requirements, site), "a wheel from another file"


def test_uvs_output_is_read_with_its_hashes_and_index_and_written_back_the_same(tmp_path):
    compiled = tmp_path / "core.txt"
    text = (
        "six==1.16.0 \\\n    --hash=sha256:" + "a" * 64 + " \\\n    --hash=sha256:" + "b" * 64 + "\n"
        "    # from https://pypi.org/simple\n"
    )
    compiled.write_text(text)
    entries = locking.read_compiled(compiled)
    assert entries["six"].pin.hashes == ("a" * 64, "b" * 64) and entries["six"].index == "https://pypi.org/simple"
    assert locking.render(entries.values(), "") == text


def test_a_find_links_wheel_is_hashed_here_and_an_entry_without_any_hash_is_refused(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "demo-1.0+cpu-py3-none-any.whl").write_bytes(b"a wheel")
    compiled = tmp_path / "core.txt"
    compiled.write_text(f"demo==1.0+cpu\n    # from file://{wheels}\nother==2.0\n")
    entries = locking.read_compiled(compiled)
    import hashlib

    assert locking.find_links_hashes(entries["demo"]) == (hashlib.sha256(b"a wheel").hexdigest(),)
    try:
        locking.hashed(entries, "core")
    except locking.LockError as error:
        assert "other==2.0 (from no index) no hash" in str(error) and "HINT" in str(error)
    else:
        raise AssertionError("an entry without a hash was accepted")


def test_the_committed_locks_hash_every_entry_and_torch_holds_each_locked_builds_hashes():
    core = read_lock(ENVS / "requirements.lock")
    assert all(pin.hashes for pin in core.pins.values())
    for path in sorted(ENVS.glob("requirements-torch-*.lock")):
        build = read_lock(path)
        if "torch" in build.pins:
            assert set(build.pins["torch"].hashes) <= set(core.pins["torch"].hashes), path
            assert all(pin.hashes for pin in build.pins.values())
        else:
            assert "# Not locked: " in path.read_text(), f"{path} says why it holds no hash"
    # The CPU wheel this machine installs, where a find-links folder holds one, is among torch's hashes.
    assert "# torch: the hashes of every file of the builds locked" in (ENVS / "requirements.lock").read_text()


def test_the_dev_lock_holds_no_package_of_the_core_lock():
    core, dev = read_lock(ENVS / "requirements.lock"), read_lock(ENVS / "requirements-dev.lock")
    assert not set(core.pins) & set(dev.pins)
    assert Path(ENVS / "denied.toml").is_file()


def test_each_pylock_toml_names_the_packages_files_and_hashes_of_its_lock():
    """PEP 751's twin of each lock (tools/lock.sh, uv pip compile --format pylock.toml from the lock): the same
    packages and versions, each file's sha256 in both; torch's line in the lock also holds the machine's own
    build's (a find-links wheel no index lists) and every locked build's."""
    for pylock, sources in locking.PYLOCKS.values():
        named = locking.pylock_files(ENVS / pylock)
        locked = read_lock(*(ENVS / source for source in sources)).pins
        assert set(named) == set(locked), pylock
        for key, pin in locked.items():
            version, digests = named[key]
            assert version == pin.version, (pylock, key)
            if key == "torch":
                assert digests <= set(pin.hashes), pylock
            else:
                assert digests == set(pin.hashes), (pylock, key)


def test_a_lock_keeps_the_hashes_its_pylock_names_and_a_version_it_does_not_name_is_refused(tmp_path):
    digest = {name: name[0] * 64 for name in ("attrs", "b-wheel", "cp310")}
    lock = f"# header\nattrs==25.1.0 \\\n    --hash=sha256:{digest['attrs']} \\\n    --hash=sha256:{digest['cp310']}\n"
    lock += "    # from https://pypi.org/simple\n"
    pylock = (
        'lock-version = "1.0"\n[[packages]]\nname = "attrs"\nversion = "25.1.0"\n'
        f'wheels = [{{ url = "https://x/attrs-25.1.0-py3-none-any.whl", '
        f'hashes = {{ sha256 = "{digest["attrs"]}" }} }}]\n'
    )
    for pylock_name, sources in locking.PYLOCKS.values():
        for source in sources:
            (tmp_path / source).write_text(lock)
        (tmp_path / pylock_name).write_text(pylock)
    locking.agree(tmp_path)
    assert (tmp_path / locking.CORE).read_text() == (
        f"# header\nattrs==25.1.0 \\\n    --hash=sha256:{digest['attrs']}\n    # from https://pypi.org/simple\n"
    )
    (tmp_path / locking.CORE).write_text(lock.replace("25.1.0", "25.2.0"))
    with pytest.raises(LockError) as refused:
        locking.agree(tmp_path)
    assert str(refused.value) == "requirements.lock: attrs==25.2.0, and its pylock.toml names 25.1.0"


def test_another_pythons_resolution_is_compared_with_this_ones_torch_taken_from_pypis_build(tmp_path):
    def compiled(name: str, *pins: str) -> Path:
        path = tmp_path / name
        path.write_text("".join(f"{pin} \\\n    --hash=sha256:{'a' * 64}\n" for pin in pins))
        return path

    here = compiled("all.txt", "numpy==2.4.6", "pyyaml==6.0.4")
    build = compiled("build.txt", "torch==2.13.0", "triton==3.7.1")
    same = compiled("same.txt", "numpy==2.4.6", "pyyaml==6.0.4", "torch==2.13.0", "triton==3.7.1")
    assert locking.differences(same, [here, build]) == []
    other = compiled("other.txt", "audioop-lts==0.2.2", "numpy==2.4.6", "torch==2.13.0", "triton==3.7.1")
    assert locking.differences(other, [here, build]) == ["+audioop-lts==0.2.2", "-pyyaml==6.0.4"]
    # tools/lock.sh's one start for every other Python: the first that differs is said, in one line.
    command = ["same", str(same), str(other), "--as", str(here), str(build), "--python", "3.12", "3.13"]
    assert locking.main([*command, "--here", "3.11"]) == 1
    assert locking.main([*command[:2], *command[3:6], "--python", "3.12", "--here", "3.11"]) == 0


def test_lock_sh_says_its_usage_and_refuses_an_option_it_does_not_know_before_locking_anything(tmp_path):
    """tools/lock.sh read only `--upgrade`: --help, or a typo (--upgrad), re-locked everything (a minute, online)."""
    checkout = copy_of_this_checkout(tmp_path / "snakeddp")
    envs = {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()}
    usage = (
        "usage: tools/lock.sh [--upgrade]   (the locks from the .in files; --upgrade: every version newest, within "
        "the pins)"
    )
    started = time.monotonic()
    helped = typed(checkout, "tools/lock.sh", "--help")
    assert helped.returncode == 0 and helped.stdout.splitlines() == [usage] and helped.stderr == ""
    refused = typed(checkout, "tools/lock.sh", "--upgrad")
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
    assert (
        hint_lines(refused)
        == refused.stderr.splitlines()
        == [f"lock: unknown option --upgrad; nothing was locked. HINT: {usage}"]
    )
    assert time.monotonic() - started < 10
    assert {path.name: path.read_bytes() for path in (checkout / "envs").iterdir() if path.is_file()} == envs
