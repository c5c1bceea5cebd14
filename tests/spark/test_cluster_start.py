"""`scripts/spark_cluster.py start` waits out a master that is up but not yet answering its state.

A fresh clone's run lost a whole test file when the master, registering its first worker in the second it logged
being elected leader, answered `/json/` with its HTML page: the wait parsed it and raised. Here a
local HTTP server answers as that master did (its HTML page, twice), then with the state the master gives once
both workers are ALIVE; the wait must return then, not fail on the page."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scripts.spark_cluster import Cluster, wait_for_workers

PAGE = b'<!DOCTYPE html><html data-bs-theme="light"><head><title>Spark Master</title></head><body></body></html>'
STATE = {"url": "spark://127.0.0.1:7077", "status": "ALIVE", "workers": [{"state": "ALIVE"}, {"state": "ALIVE"}]}


def test_a_master_answering_its_html_page_before_it_is_the_leader_is_waited_for(tmp_path):
    asked: list[str] = []

    class Master(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            leader = len(asked) > 2
            body = json.dumps(STATE).encode() if leader else PAGE
            self.send_response(200)
            self.send_header("Content-Type", "application/json" if leader else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Master)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # The daemons' pids are this process's: alive throughout, as the master's and workers' are.
        cluster = Cluster(tmp_path, 7077, server.server_address[1], pids={"master": os.getpid()})
        wait_for_workers(cluster, 2)
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/json/"] * 3
