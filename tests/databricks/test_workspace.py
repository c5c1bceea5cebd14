"""snakeddp.databricks.workspace: the credential check, in a process of its own with a fresh home, as
the profile's preflight and each train job make it. A host that does not answer (a closed port on
127.0.0.1, a non-routable address) is one line with a HINT in seconds, not the SDK's five minutes of
retries; followed as the HINT says (the host set to a workspace that answers: the local stub), the
check passes; a token the workspace refuses is one line too. No token reaches any output."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import subprocess_env

TOKEN = "dapi-77c1e0-workspace-stub-token"
CHECK = (
    "import os\n"
    "from snakeddp.databricks import workspace\n"
    "from snakeddp.errors import exit_code\n"
    "profile = os.environ.get('CHECKED_PROFILE')  # databricks.profile\n"
    "raise SystemExit(exit_code('snakeddp.databricks', lambda: print(workspace.connect(profile).config.host) or 0))\n"
)
# Far above the check's own bound (workspace.CHECK_S, per request), far below the SDK's 300 s of retries.
IN_SECONDS = 30
# A hang fails here rather than hold the suite.
GUARD_S = 60


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(home: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in subprocess_env().items() if not k.startswith("DATABRICKS_")}
    return subprocess.run(
        [sys.executable, "-c", CHECK],
        env={**clean, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1 and lines[0].count("HINT:") == 1, done.stdout + done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("host", "token"), [("closed-port", None), ("https://10.255.255.1", None), ("closed-port", TOKEN)]
)
def test_an_unanswering_host_is_one_line_in_seconds_and_the_hints_host_passes(host, token, stub, tmp_path):
    host = f"http://127.0.0.1:{closed_port()}" if host == "closed-port" else host
    started = time.monotonic()
    line = one_line(check(tmp_path, DATABRICKS_HOST=host, **({"DATABRICKS_TOKEN": token} if token else {})))
    took = time.monotonic() - started
    assert took < IN_SECONDS, f"the check gave up after {took:.0f} s"
    if token is None:  # the chain finds nothing to authenticate with, after the host's probe gave up
        assert line.startswith("snakeddp.databricks: no usable Databricks credentials"), line
        assert "HINT: export DATABRICKS_HOST=https://<workspace-url> and DATABRICKS_TOKEN=" in line
    else:
        assert f"the Databricks workspace {host} did not answer as one" in line, line
        assert "HINT: set DATABRICKS_HOST (or the profile's host) to your workspace's URL" in line
        assert TOKEN not in line
    # As the HINT says: the host set to a workspace that answers (the stub), with its token.
    done = check(tmp_path, DATABRICKS_HOST=stub.url, DATABRICKS_TOKEN=TOKEN)
    assert done.returncode == 0 and done.stdout.strip() == stub.url, done.stdout + done.stderr
    assert stub.requests("GET", "/api/2.0/preview/scim/v2/Me"), "the check asked the workspace who the token is"


def test_a_token_the_workspace_refuses_is_one_line_naming_the_credentials(stub, tmp_path):
    refused = one_line(check(tmp_path, DATABRICKS_HOST=stub.url, DATABRICKS_TOKEN="dapi-revoked-0000"))
    assert "checking the Databricks credentials failed" in refused and "(Unauthenticated)" in refused, refused
    assert "HINT: export DATABRICKS_HOST=" in refused and "dapi-revoked-0000" not in refused


def test_a_profile_the_config_names_and_databrickscfg_lacks_is_named_and_adding_it_as_hinted_passes(stub, tmp_path):
    """The variables exported beside it do not help: the SDK reads the named profile. The HINT's first remedy is
    the profile; databricks configure writes it to ~/.databrickscfg as below."""
    exported = {"DATABRICKS_HOST": stub.url, "DATABRICKS_TOKEN": TOKEN, "CHECKED_PROFILE": "nope"}
    (tmp_path / ".databrickscfg").write_text(f"[other]\nhost = {stub.url}\ntoken = {TOKEN}\n")
    line = one_line(check(tmp_path, **exported))
    assert "no usable Databricks credentials (profile nope)" in line, line
    assert "HINT: add a [nope] profile to ~/.databrickscfg" in line and "export DATABRICKS_HOST" not in line, line
    with (tmp_path / ".databrickscfg").open("a") as config:
        config.write(f"[nope]\nhost = {stub.url}\ntoken = {TOKEN}\n")
    done = check(tmp_path, CHECKED_PROFILE="nope")
    assert done.returncode == 0 and done.stdout.strip() == stub.url, done.stdout + done.stderr
