"""The deny list (envs/denied.toml), yanked releases and the advisory service check, on real locks and uv."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.venvs import UV
from snakeddp.environment import advisories
from snakeddp.errors import LockError
from tests.checkout import copy_of_this_checkout, typed, with_core_venv
from tests.helpers import REPO, subprocess_env

DENIED = advisories.load()
LOCKS = sorted((REPO / "envs").glob("*.lock"))


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakeddp.environment.advisories", *args]
    return subprocess.run(command, capture_output=True, text=True, env=subprocess_env(**env), cwd=REPO, check=False)


def test_the_committed_locks_and_pyprojects_ranges_hold_no_denied_release():
    done = run("check", *map(str, LOCKS), "--pyproject", "pyproject.toml")
    assert done.returncode == 0, done.stderr


def test_each_advisory_of_the_issue_is_listed_with_its_first_good_version():
    by_advisory = {denial.advisory: denial for denial in DENIED}
    assert by_advisory["GHSA-w37p-236h-pfx3"].denies("lightning", "2.6.2")
    assert by_advisory["GHSA-w37p-236h-pfx3"].denies("lightning", "2.6.3")
    assert not by_advisory["GHSA-w37p-236h-pfx3"].denies("lightning", "2.6.4")
    assert by_advisory["GHSA-qqmf-gpg7-g8gw"].denies("lightning", "2.6.5")
    assert not by_advisory["GHSA-qqmf-gpg7-g8gw"].denies("lightning", "2.6.6")
    # 2.6.2 is denied twice: the first good version is past both fixes.
    assert advisories.first_allowed("lightning", DENIED, "2.6.2") == "2.6.6"
    assert advisories.constraints(DENIED) == ["lightning!=2.6.2", "lightning!=2.6.3", "lightning>=2.6.6"]


def test_a_lock_holding_a_denied_release_is_refused_naming_both_advisories(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"lightning==2.6.2 --hash=sha256:{'a' * 64}\nnumpy==2.4.6\n")
    done = run("check", str(lock))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{lock}: lightning 2.6.2 is denied by envs/denied.toml (GHSA-w37p-236h-pfx3: published with code that stole "
        "credentials on import (live for 42 minutes; a mirror or cache may still hold them), fixed in 2.6.4; "
        "GHSA-qqmf-gpg7-g8gw (CVE-2026-58659): code execution in load_from_checkpoint, fixed in 2.6.6); the first "
        "good version is 2.6.6. HINT: tools/add.sh lightning==2.6.6"
    ]


def test_a_range_that_admits_a_denied_release_is_named(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["lightning>=2.6.0,<=2.6.6", "numpy>=2"]\n')
    problems = advisories.check_ranges(pyproject, DENIED)
    assert [line.split(" admits ")[1].split(" (")[0] for line in problems] == [
        "lightning==2.6.2",
        "lightning==2.6.3",
        "lightning<2.6.6",
    ]
    pyproject.write_text('[project]\ndependencies = ["lightning>=2.6.6,<=2.6.6"]\n')
    assert advisories.check_ranges(pyproject, DENIED) == []


def test_a_deny_list_entry_that_is_not_one_is_one_line(tmp_path):
    broken = tmp_path / "denied.toml"
    broken.write_text('[[release]]\npackage = "x"\nversions = ["=>1"]\nadvisory = "A"\nfixed = "2"\n')
    with pytest.raises(LockError, match=r"release 1 is not a deny entry .*HINT"):
        advisories.load(broken)


def test_a_yanked_release_uv_resolves_is_refused_from_uvs_own_warning(tmp_path):
    """attrs 21.1.0 is yanked on PyPI ("Installable but not importable on Python 3.4."): uv says so while it
    resolves, and the check turns its warning into a refusal."""
    pins = tmp_path / "pins.txt"
    pins.write_text("attrs==21.1.0\n")
    log = tmp_path / "uv.log"
    with log.open("w") as stderr:
        subprocess.run([UV, "pip", "compile", "--no-deps", "--python", sys.executable, pins], stdout=subprocess.DEVNULL,
                       stderr=stderr, check=True)  # fmt: skip
    done = run("check", "--yanked", str(log))
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "lock: attrs 21.1.0 is yanked on its index (PEP 592: Installable but not importable on Python 3.4.). "
        "HINT: pin another release with tools/add.sh attrs==VERSION, or re-resolve with tools/lock.sh --upgrade"
    ]


def test_where_no_advisory_service_answers_one_line_says_the_check_did_not_run(tmp_path):
    """pip-audit asks PyPI's JSON API, then OSV: through a proxy nothing listens on, neither answers, and the
    check says so in one line instead of passing."""
    lock = tmp_path / "requirements.lock"
    lock.write_text("certifi==2026.10.19.post1\n")
    done = run("audit", str(lock), HTTPS_PROXY="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(
        "advisories: the advisory check did not run: no advisory service answered (PyPI's JSON API: "
    )
    assert "; OSV: " in line and line.endswith(
        "the locks were checked against envs/denied.toml and the index's yanks only."
    )


class Service(BaseHTTPRequestHandler):
    """A local service answering as the test sets it: (status, body) by path."""

    answers: dict[str, tuple[int, bytes]] = {}

    def do_GET(self) -> None:
        self.answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer()

    def answer(self) -> None:
        status, body = self.answers.get(self.path, (404, b"Not Found"))
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Osv(BaseHTTPRequestHandler):
    """OSV's /v1/query as a local server: the answer kept for the release asked about, else {} (OSV's answer for a
    release it knows no advisory of)."""

    answers: dict[tuple[str, str], bytes] = {}

    def do_POST(self) -> None:
        query = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        body = self.answers.get((query["package"]["name"], query["version"]), b"{}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_the_audit_fails_on_a_release_the_advisory_service_lists(tmp_path):
    """`make lint`'s audit (pip-audit) against OSV's answer for lightning 2.6.5 (tests/environment/data: OSV's JSON
    schema, as api.osv.dev answers /v1/query; neither OSV nor PyPI answers from this machine, so it is served by a
    local server the audit reaches as a site's OSV mirror, SNAKEDDP_OSV_URL): the advisory fails it, in one line
    naming it and its fix; without that release it passes, having asked about every release."""
    Osv.answers = {("lightning", "2.6.5"): (Path(__file__).parent / "data" / "osv-lightning-2.6.5.json").read_bytes()}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Osv)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # PyPI's JSON API is asked first: through a proxy nothing listens on it does not answer, and OSV is asked.
    offline = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
    mirror = {**offline, "no_proxy": "127.0.0.1", "SNAKEDDP_OSV_URL": f"http://127.0.0.1:{server.server_port}/v1/query"}
    lock = tmp_path / "requirements.lock"
    try:
        lock.write_text("lightning==2.6.5\nnumpy==2.4.6\n")
        found = run("audit", str(lock), **mirror)
        assert found.returncode == 1, found.stderr
        assert found.stdout.splitlines() == ["advisories: OSV answered for all 2 releases: 1 known vulnerabilities"]
        assert found.stderr.splitlines() == [
            # pip-audit names an advisory by its CVE first, its other ids (aliases) after it.
            "advisories: lightning 2.6.5: CVE-2026-58659 (GHSA-qqmf-gpg7-g8gw), fixed in 2.6.6. HINT: tools/add.sh "
            "a fixed release"
        ]
        lock.write_text("lightning==2.6.6\nnumpy==2.4.6\n")
        clean = run("audit", str(lock), **mirror, SNAKEDDP_ADVISORIES_REQUIRED="1")
        assert clean.returncode == 0, clean.stderr
        assert clean.stdout.splitlines() == ["advisories: OSV answered for all 2 releases: 0 known vulnerabilities"]
    finally:
        server.shutdown()


def test_offline_the_audit_passes_saying_so_unless_an_answer_is_required(tmp_path):
    """Where no advisory service answers, the audit says so and passes (the deny list and yanks were checked); with
    SNAKEDDP_ADVISORIES_REQUIRED set (a CI that reaches one) it fails, in one line whose HINT the test above takes."""
    lock = tmp_path / "requirements.lock"
    lock.write_text("numpy==2.4.6\n")
    offline = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    required = run("audit", str(lock), **offline, SNAKEDDP_OSV_URL="http://127.0.0.1:9/v1/query",
                   SNAKEDDP_ADVISORIES_REQUIRED="1")  # fmt: skip
    assert required.returncode == 3
    assert required.stdout.startswith(advisories.NOT_RUN + "no advisory service answered")
    assert required.stderr.splitlines() == [
        "advisories: SNAKEDDP_ADVISORIES_REQUIRED is set, and no advisory service answered (above). HINT: let this "
        "machine reach pypi.org or api.osv.dev (HTTPS_PROXY for a proxy), or point SNAKEDDP_OSV_URL at an OSV mirror"
    ]


def test_a_service_is_asked_about_one_release_first_and_only_an_answer_with_advisories_counts(monkeypatch):
    """What pip-audit would be asked, asked once of a real local server: PyPI's JSON with its vulnerabilities
    list and OSV's object (empty for a release it knows nothing of) count as answers; a 404, a page of HTML (a
    mirror's) or PyPI's JSON without the list do not, each said with the URL asked."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(advisories, "PYPI_RELEASE", base + "/pypi/{name}/{version}/json")
    monkeypatch.setattr(advisories, "OSV_QUERY", base + "/v1/query")
    try:
        release = "/pypi/certifi/2026.10.19.post1/json"
        Service.answers = {release: (200, json.dumps({"info": {}, "vulnerabilities": []}).encode()),
                           "/v1/query": (200, b"{}")}  # fmt: skip
        assert advisories._unanswered("pypi", "certifi", "2026.10.19.post1") is None
        assert advisories._unanswered("osv", "certifi", "2026.10.19.post1") is None
        assert "did not answer (Not Found)" in advisories._unanswered("pypi", "absl-py", "2.5.1")
        Service.answers = {release: (200, json.dumps({"info": {}}).encode()), "/v1/query": (200, b"<html></html>")}
        assert (
            advisories._unanswered("pypi", "certifi", "2026.10.19.post1")
            == f"{base}{release} answered without advisories"
        )
        said = advisories._unanswered("osv", "certifi", "2026.10.19.post1")
        assert said.startswith(f"{base}/v1/query did not answer"), said
    finally:
        server.shutdown()


# lightning 2.6.5's files on PyPI, as tools/lock.sh would have hashed them (GHSA-qqmf-gpg7-g8gw denies it).
DENIED_ENTRY = (
    "lightning==2.6.5 \\\n"
    "    --hash=sha256:16a30310ed69afde3748491feb5d13508908effd70390d2bfc203dc0812a4b4a \\\n"
    "    --hash=sha256:3702fb7ef4ab51a8c3d4a140f4674514fe72973a9673dfa05e07a078e2767389\n"
)
REFUSED = (
    "setup: envs/requirements.lock: lightning 2.6.5 is denied by envs/denied.toml (GHSA-qqmf-gpg7-g8gw "
    "(CVE-2026-58659): code execution in load_from_checkpoint, fixed in 2.6.6); the first good version is 2.6.6. "
    "HINT: tools/add.sh lightning==2.6.6"
)


def pin_denied_lightning(lock: Path) -> None:
    """``lock``'s lightning entry (2.6.6, its hashes and index) replaced by 2.6.5's, as a hand or a merge would."""
    text = lock.read_text()
    start = text.index("lightning==2.6.6 \\\n")
    end = text.index("\n", start) + 1
    while text[end:].startswith(("    --hash", "    # from")):
        end = text.index("\n", end) + 1
    lock.write_text(text[:start] + DENIED_ENTRY + text[end:])


def venv_files(venv: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(venv)): (path.lstat().st_size, path.lstat().st_mtime_ns) for path in venv.rglob("*")}


def test_a_lock_edited_to_name_a_denied_release_stops_make_run_before_anything_is_installed(tmp_path):
    """As a hand or a merge would leave it: the lock names lightning 2.6.5 with its real hashes. `make run` stops
    in the set-up's one line naming the advisory, the venv exactly as it was (lightning 2.6.6); on a fresh
    clone no venv is made, even where the machine's Python has no packaging (then pip's own is used)."""
    root = copy_of_this_checkout(tmp_path / "snakeddp")
    venv = with_core_venv(root)
    pin_denied_lightning(root / "envs" / "requirements.lock")
    before = venv_files(venv)

    stopped = typed(root, "make", "run")
    assert stopped.returncode != 0
    assert [line for line in stopped.stderr.splitlines() if line.startswith("setup:")] == [REFUSED], stopped.stderr
    assert "installing" not in stopped.stdout and "Traceback" not in stopped.stderr, stopped.stdout
    assert venv_files(venv) == before
    shown = typed(root, str(venv / "bin/python"), "-c", "import importlib.metadata as m; print(m.version('lightning'))")
    assert shown.stdout.strip() == "2.6.6"

    fresh = root / "fresh-venv"
    bare = "/usr/bin/python3.11"  # Debian's, without packaging
    assert typed(root, bare, "-c", "import packaging").returncode != 0
    refused = typed(root, "tools/setup.sh", VENV=str(fresh), PYTHON=bare)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == REFUSED, refused.stderr
    assert not fresh.exists()


def test_a_release_denied_after_it_was_installed_stops_the_next_set_up(tmp_path):
    """The check's stamp is made from the deny list too: set up once (the check passed, the stamp written), then an
    advisory added for the installed lightning 2.6.6: the next set-up refuses it in one line, the venv as it was."""
    root = copy_of_this_checkout(tmp_path / "snakeddp")
    venv = with_core_venv(root)
    first = typed(root, "tools/setup.sh")
    assert first.returncode == 0 and (venv / ".snakeddp-denied").is_file(), first.stderr
    denied = root / "envs" / "denied.toml"
    denied.write_text(
        denied.read_text() + '\n[[release]]\npackage = "lightning"\nversions = ["==2.6.6"]\n'
        'advisory = "GHSA-test-0000-0000"\nsummary = "added after the venv was set up"\nfixed = "2.6.7"\n'
    )
    before = venv_files(venv)
    refused = typed(root, "tools/setup.sh")
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "setup: envs/requirements.lock: lightning 2.6.6 is denied by envs/denied.toml (GHSA-test-0000-0000: added "
        "after the venv was set up, fixed in 2.6.7); the first good version is 2.6.7. HINT: tools/add.sh "
        "lightning==2.6.7"
    ]
    assert venv_files(venv) == before


def test_the_images_build_stops_at_its_deny_check_before_the_stage_that_installs(tmp_path):
    """No registry answers here, so no image is built: the Dockerfile's check stage is run as its instructions
    say (its COPYs laid out in a directory as its root, its RUN in bash there, with a Python that has packaging,
    as the base image's conda has), on a lock naming lightning 2.6.5 and on the committed one; and the stage that
    installs takes its locks from that stage, so a build whose check failed installs nothing."""
    from dockerfile_parse import DockerfileParser  # a test and lint tool (requirements-dev)

    stages: list[list[dict]] = []
    for instruction in DockerfileParser(path=str(REPO / "envs" / "Dockerfile")).structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    (check,) = [stage for stage in stages if stage[0]["value"].endswith(" AS denied")]
    installs = stages[-1]
    copies = [i["value"].split() for i in check if i["instruction"] == "COPY"]
    (run_check,) = [i["value"] for i in check if i["instruction"] == "RUN"]
    assert [i["value"] for i in check if i["instruction"] == "WORKDIR"] == ["/"]
    root = tmp_path / "denied"
    for *sources, destination in copies:
        for source in sources:
            for path in REPO.glob(source):
                target = root / destination / path.name if destination.endswith("/") else root / destination
                target.parent.mkdir(parents=True, exist_ok=True)
                (shutil.copytree if path.is_dir() else shutil.copy)(path, target)
    environ = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def checked() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", run_check], cwd=root, env=environ, capture_output=True, text=True)

    passed = checked()
    assert passed.returncode == 0, passed.stderr
    pin_denied_lightning(root / "envs" / "requirements.lock")
    stopped = checked()
    assert stopped.returncode == 1 and stopped.stderr.splitlines() == [REFUSED.removeprefix("setup: ")]
    locks_copied = [i for i in installs if i["instruction"] == "COPY" and "envs/requirements.lock" in i["value"]]
    first_install = next(n for n, i in enumerate(installs) if "pip install" in i["value"])
    assert [i["value"].split()[0] for i in locks_copied] == ["--from=denied"]
    assert installs.index(locks_copied[0]) < first_install
