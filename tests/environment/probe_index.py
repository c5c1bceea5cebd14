"""An index of this suite's own, served over HTTP as PyPI serves one (PEP 691 JSON with PEP 700 upload times), with
one package, cooldown-probe: 1.0 uploaded 30 days ago, 1.1 an hour ago, so "published today" stays true whenever
a test runs (tests/environment/test_cooldown.py, test_add.py)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROBE = "cooldown-probe"


@contextmanager
def probe_index(files: Path) -> Iterator[str]:
    """The index's URL (…/simple) while it is served, its wheels built in ``files``."""
    from tests.environment.test_add import fake_wheel  # here: test_add imports this module

    now = datetime.now(UTC)
    uploaded = {"1.0": now - timedelta(days=30), "1.1": now - timedelta(hours=1)}
    wheels = {version: fake_wheel(files, "cooldown_probe", version, "") for version in uploaded}

    class Index(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # http.server's names; uv asks for a wheel's size first
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            base = f"http://127.0.0.1:{self.server.server_port}"
            if self.path.rstrip("/") == f"/simple/{PROBE}":
                page = {
                    "meta": {"api-version": "1.1"},
                    "name": PROBE,
                    "versions": list(uploaded),
                    "files": [
                        {
                            "filename": wheels[v].name,
                            "url": f"{base}/files/{wheels[v].name}",
                            "hashes": {"sha256": hashlib.sha256(wheels[v].read_bytes()).hexdigest()},
                            "upload-time": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                        }
                        for v, when in uploaded.items()
                    ],
                }
                body, kind = json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json"
            elif self.path.startswith("/files/") and (files / self.path[7:]).is_file():
                body, kind = (files / self.path[7:]).read_bytes(), "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple"
    finally:
        server.shutdown()
