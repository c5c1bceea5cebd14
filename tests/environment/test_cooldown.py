"""The cooldown on new releases (snakeddp.environment.cooldown, envs/cooldown.toml): uv, given the cutoff, takes the
newest release outside it and refuses a pin inside it, which is said in one line naming the cooldown. The releases
come from an index of this test's own (PEP 691 JSON with PEP 700 upload times, served over HTTP as PyPI serves them),
so "published today" stays true whenever the test runs (tests/environment/probe_index.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.venvs import UV
from snakeddp.environment import cooldown
from snakeddp.errors import LockError
from tests.environment.probe_index import PROBE, probe_index


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Iterator[str]:
    with probe_index(tmp_path_factory.mktemp("index")) as url:
        yield url


def compiled(tmp_path: Path, index: str, requirement: str) -> subprocess.CompletedProcess:
    (tmp_path / "probe.in").write_text(requirement + "\n")
    args = cooldown.load().uv_args(datetime.now(UTC))
    return subprocess.run(
        [UV, "pip", "compile", "--quiet", "--no-header", "--cache-dir", tmp_path / "cache", "--index-url", index,
         *args, tmp_path / "probe.in"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_newest_release_outside_the_cooldown_is_taken(tmp_path, index):
    taken = compiled(tmp_path, index, PROBE)
    assert taken.returncode == 0, taken.stderr
    assert [line for line in taken.stdout.splitlines() if line.startswith(PROBE)] == [f"{PROBE}==1.0"]


def test_a_pin_inside_the_cooldown_is_refused_in_one_line_naming_it(tmp_path, index):
    refused = compiled(tmp_path, index, f"{PROBE}==1.1")
    assert refused.returncode != 0
    (tmp_path / "uv.log").write_text(refused.stderr)
    (line,) = cooldown.explain([tmp_path / "uv.log"], cooldown.load(), "lock")
    published = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%d")
    assert line.startswith(f"lock: {PROBE} 1.1 was published {published} ") and "inside the 7-day cooldown" in line
    assert f"HINT: take the newest release outside it (tools/add.sh {PROBE})" in line


def test_a_package_of_its_own_needs_a_reason_and_the_header_says_every_cutoff(tmp_path):
    config = tmp_path / "cooldown.toml"
    config.write_text('days = 7\n[[package]]\nname = "Example"\ndays = 0\n')
    with pytest.raises(LockError, match="needs a name and the reason for its own wait"):
        cooldown.load(config)
    config.write_text(config.read_text() + 'reason = "a fix that cannot wait"\n')
    loaded = cooldown.load(config)
    today = datetime(2026, 11, 28, 19, 56, tzinfo=UTC)
    assert loaded.uv_args(today) == [
        "--exclude-newer", "2026-11-21T00:00:00Z", "--exclude-newer-package", "example=2026-11-28T00:00:00Z",
    ]  # fmt: skip
    assert loaded.header(today) == (
        "# No release uploaded after 2026-11-21T00:00:00Z (a 7-day cooldown, envs/cooldown.toml; "
        "example: 0 days (a fix that cannot wait))."
    )


def test_the_committed_locks_say_their_cutoff_and_hold_nothing_younger():
    envs = Path(cooldown.COOLDOWN).parent
    for lock in ("requirements.lock", "requirements-dev.lock", "requirements-azureml-v1.lock"):
        header = [line for line in (envs / lock).read_text().splitlines()[:6] if "cooldown" in line]
        assert len(header) == 1 and header[0].startswith("# No release uploaded after 2026-"), lock
        cutoff = header[0].split()[5]
        pylock = (envs / f"pylock.{lock.removesuffix('.lock')}.toml").read_text()
        times = [part.split(",")[0] for part in pylock.split("upload-time = ")[1:]]
        assert times and max(times) < cutoff, lock
