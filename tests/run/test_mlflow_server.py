"""Where MLflow logs, and the check that its server answers: a closed port, a host that never answers,
a server behind a login, and the real `mlflow server` (tests/mlflow_server.py)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from pathlib import Path

import pytest

from snakeddp.errors import TrackerError
from snakeddp.run.mlflow_server import TIMEOUT_S, check_reachable, mlflow_uri, split_credentials
from tests.mlflow_server import free_port


def test_credentials_are_split_off_the_uri():
    assert split_credentials("https://alice:s3cret@mlflow.example.org:5000/x") == (
        "https://mlflow.example.org:5000/x",
        "alice",
        "s3cret",
    )
    assert split_credentials("https://mlflow.example.org") == ("https://mlflow.example.org", None, None)


def test_default_mlflow_store_is_results_mlruns(tmp_path):
    run_dir = tmp_path / "results" / "runs" / "base"
    assert mlflow_uri(None, {}, run_dir) == f"file:{tmp_path / 'results' / 'mlruns'}"
    assert mlflow_uri(None, {"MLFLOW_TRACKING_URI": "http://h:5000"}, run_dir) == "http://h:5000"
    assert mlflow_uri("store", {"MLFLOW_TRACKING_URI": "http://h:5000"}, run_dir) == f"file:{Path('store').resolve()}"


def test_a_closed_port_is_one_line_with_a_hint_in_well_under_a_second_and_no_credentials():
    uri = f"http://alice:s3cret@127.0.0.1:{free_port()}/"
    started = time.perf_counter()
    with pytest.raises(TrackerError) as error:
        check_reachable(uri)
    assert time.perf_counter() - started < 1
    message = str(error.value)
    assert "\n" not in message and "no MLflow server answers at http://127.0.0.1:" in message
    assert "Connection refused" in message and "HINT: start the server" in message
    assert "s3cret" not in message and "alice" not in message


def test_a_server_that_never_answers_is_refused_after_the_timeout():
    with socket.socket() as silent:  # listens, and never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.perf_counter()
        with pytest.raises(TrackerError, match="timed out"):
            check_reachable(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5)
        assert time.perf_counter() - started < 0.5 + 1
    assert TIMEOUT_S <= 10, "an unreachable server is found in seconds"


def test_any_http_answer_counts_a_login_page_included():
    class Login(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Login)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_reachable(f"http://127.0.0.1:{server.server_port}/")
    finally:
        server.shutdown()
        server.server_close()


def test_stores_that_are_no_server_are_not_asked(tmp_path):
    for uri in (f"file:{tmp_path}", "databricks", f"sqlite:///{tmp_path}/m.db"):
        check_reachable(uri)


@pytest.mark.e2e
def test_the_hint_followed_a_running_server_answers(mlflow_server):
    """What the HINT says: with the server started (and the URI pointing at it) the check passes."""
    print(f"mlflow server answered after {mlflow_server.started_in_s:.1f} s")
    check_reachable(mlflow_server.uri)
    user, password = "alice", "s3cret"
    check_reachable(mlflow_server.uri.replace("http://", f"http://{user}:{password}@"))
