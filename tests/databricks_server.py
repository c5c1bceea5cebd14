"""A local HTTP server that speaks the small part of Databricks' REST API snakeddp uses, for
databricks-sdk's own client to talk to: no workspace is reachable from here.

It stands in for the cloud: it records every request (path, headers, body),
keeps files under a local folder (the Files API: ``/api/2.0/fs/files``, ``/api/2.0/fs/directories``),
answers who the token is (SCIM's ``Me``, snakeddp's credential check) and MLflow's experiment lookup as a
workspace without the experiment does, and hands a submitted run (``/api/2.2/jobs/runs/submit``) to
the test's ``runner``, which does what the job cluster would do and returns its result state and
message (and, optionally, the task's output); ``runs/get`` answers with it, the cluster the run ran on
(``cluster_instance``) and its one task's run, whose output ``runs/get-output`` answers with (``logs``).
The workspace's node types (``/api/2.1/clusters/list-node-types``) are ``NODE_TYPES``, each with its
``num_gpus`` as the API documents it (``node_types`` may be replaced), an existing cluster
(``existing``) answers ``get`` with its node type.
All-purpose clusters (``/api/2.1/clusters``: create, get, start, delete) go PENDING, then RUNNING once
``get`` has been asked ``starts_after`` times, as a cluster acquires its nodes; delete terminates one
(USER_REQUEST); ``idle`` terminates one as its autotermination would (INACTIVITY). A run records the
state its existing cluster was in when it was submitted.
A request without the expected bearer token is refused (401), as a workspace refuses it, and a
submitted run or a created cluster whose body the SDK's own request types do not describe (a field they
do not have, a required one missing, a value of another type) is refused (400, INVALID_PARAMETER_VALUE,
naming the field), as the REST API refuses a malformed request: the stub judges what it is sent with the
SDK's definitions, not with the product's.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import threading
import time
import typing
from collections.abc import Callable
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from databricks.sdk.service import compute, jobs

FILES, DIRECTORIES = "/api/2.0/fs/files", "/api/2.0/fs/directories"
JOBS = "/api/2.2/jobs/runs"
CLUSTERS = "/api/2.1/clusters"
# A submitted run's task run id: the run's own, this far apart.
TASK_RUNS = 100_000
# Node types as GET /api/2.1/clusters/list-node-types answers them (ListNodeTypesResponse: node_type_id,
# memory_mb, num_cores, num_gpus, description, instance_type_id, category), AWS's and Azure's names, GPU
# families whose names no pattern foresaw among them (p6-b200, gr6).
NODE_TYPES = [
    {"node_type_id": node, "instance_type_id": node, "description": node, "memory_mb": memory, "num_cores": cores,
     "num_gpus": gpus, "category": "GPU Accelerated" if gpus else "General Purpose"}
    for node, memory, cores, gpus in (
        ("i3.xlarge", 31232, 4.0, 0), ("m5d.large", 8192, 2.0, 0), ("g5.xlarge", 16384, 4.0, 1),
        ("g5.12xlarge", 196608, 48.0, 4), ("gr6.4xlarge", 131072, 16.0, 1), ("p6-b200.48xlarge", 2097152, 192.0, 8),
        ("Standard_D4ds_v5", 16384, 4.0, 0), ("Standard_NC24ads_A100_v4", 225280, 24.0, 1),
    )
]  # fmt: skip
# A runner gets the submitted body and the folder that holds the volume's files.
Runner = Callable[[dict[str, Any], Path], tuple[str, ...]]


def first(problems: Any) -> str | None:
    return next(filter(None, problems), None)


def malformed(value: Any, kind: Any, where: str) -> str | None:
    """What in ``value`` (a request's JSON) the SDK's type ``kind`` does not describe, or None."""
    if typing.get_origin(kind) is typing.Union:  # Optional[X]: present, so it must be an X
        (kind,) = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is list:
        if not isinstance(value, list):
            return f"{where} is not a list"
        return first(malformed(item, args[0], f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            return f"{where} is not an object"
        return first(malformed(item, args[1], f"{where}.{key}") for key, item in value.items())
    if dataclasses.is_dataclass(kind):
        return malformed_object(value, typing.get_type_hints(kind), where)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        known = {member.value for member in kind}
        return None if value in known else f"{where}: {value!r} is not one of {kind.__name__}"
    if kind is Any or (kind is float and type(value) is int):
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        return f"{where}: {value!r} is not a {kind.__name__}"
    return None


def malformed_object(value: Any, fields: dict[str, Any], where: str, required: set[str] | None = None) -> str | None:
    if not isinstance(value, dict):
        return f"{where} is not an object"
    named = f"{where}." if where else ""
    if unknown := sorted(set(value) - set(fields)):
        return f"unknown field {named}{unknown[0]}"
    if required is None:  # a dataclass: its fields that are not Optional
        required = {name for name, kind in fields.items() if type(None) not in typing.get_args(kind)}
    if missing := sorted(required - set(value)):
        return f"missing required field {named}{missing[0]}"
    return first(malformed(item, fields[key], f"{named}{key}") for key, item in value.items())


def malformed_request(body: Any, method: Callable[..., Any]) -> str | None:
    """What in a request body the SDK's ``method`` (whose keyword arguments are the body's fields) does not
    take, or None."""
    fields = typing.get_type_hints(method)
    fields.pop("return", None)
    params = inspect.signature(method).parameters
    required = {name for name, param in params.items() if name != "self" and param.default is inspect.Parameter.empty}
    return malformed_object(body, fields, "", required)


class DatabricksStub:
    def __init__(self, root: Path, token: str, runner: Runner | None = None) -> None:
        self.root, self.token, self.runner = root, token, runner
        self.seen: list[dict[str, Any]] = []
        # Entries a folder's listing shows besides its files, by folder: what something else writing
        # there (or a tampered listing) would show, passed on by the SDK as given.
        self.listed: dict[str, list[dict[str, Any]]] = {}
        self.runs: dict[int, dict[str, Any]] = {}
        self.outputs: dict[int, str] = {}  # each task run's stdout and stderr, once it ended
        self.clusters: dict[str, dict[str, Any]] = {}
        self.starts_after = 2  # gets of a PENDING cluster before it is RUNNING
        # Seconds runs/get holds its answer while the run runs, answering once it ends (0: at once). The SDK's
        # waiter sleeps 1, 2, ... up to 10 s between its gets, so a run is seen to end up to 10 s after it did:
        # a test that only waits for its runs' ends sets some (a workspace's answer to a get is the same either way).
        self.gets_held_s = 0.0
        self.ended: dict[int, threading.Event] = {}
        self.node_types = list(NODE_TYPES)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                stub.handle(self, "GET")

            def do_HEAD(self) -> None:
                stub.handle(self, "HEAD")

            def do_PUT(self) -> None:
                stub.handle(self, "PUT")

            def do_POST(self) -> None:
                stub.handle(self, "POST")

            def do_DELETE(self) -> None:
                stub.handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def local(self, remote: str) -> Path:
        """Where a remote absolute path's file lives here (what a cluster's FUSE mount shows)."""
        return self.root / remote.lstrip("/")

    def requests(self, method: str, prefix: str) -> list[dict[str, Any]]:
        return [seen for seen in self.seen if seen["method"] == method and seen["path"].startswith(prefix)]

    # The handler's side: one method per API, each answering as Databricks documents it.
    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(request.path)
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        self.seen.append({"method": method, "path": parts.path, "query": parse_qs(parts.query),
                          "headers": dict(request.headers), "body": body})  # fmt: skip
        if parts.path == "/.well-known/databricks-config":  # the SDK's unauthenticated discovery probe
            return self.answer(request, 200, {})
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self.answer(request, 401, {"error_code": "UNAUTHENTICATED", "message": "Invalid access token."})
        path = unquote(parts.path)
        if path.startswith(FILES + "/"):
            return self.files(request, method, path.removeprefix(FILES), body)
        if path.startswith(DIRECTORIES + "/"):
            return self.directories(request, method, path.removeprefix(DIRECTORIES))
        if path == f"{JOBS}/submit" and method == "POST":
            if said := malformed_request(json.loads(body), jobs.JobsAPI.submit):
                return self.invalid(request, said)
            return self.submit(request, json.loads(body))
        if path == f"{JOBS}/get" and method == "GET":
            run_id = int(parse_qs(parts.query)["run_id"][0])
            if self.gets_held_s and run_id in self.ended:
                self.ended[run_id].wait(self.gets_held_s)
            run = self.runs.get(run_id)
            return self.answer(request, 200, run) if run else self.missing(request, "run")
        if path == f"{JOBS}/get-output" and method == "GET":
            return self.output(request, int(parse_qs(parts.query)["run_id"][0]))
        if path == f"{JOBS}/cancel" and method == "POST":
            run = self.runs[json.loads(body)["run_id"]]
            run["state"] = {"life_cycle_state": "TERMINATED", "result_state": "CANCELED",
                            "state_message": "Run cancelled by the user."}  # fmt: skip
            if run["run_id"] in self.ended:  # a run a test set down itself has none
                self.ended[run["run_id"]].set()
            return self.answer(request, 200, {})
        if path.startswith(CLUSTERS + "/"):
            return self.cluster(request, method, path.removeprefix(CLUSTERS + "/"), parts.query, body)
        if path == "/api/2.0/preview/scim/v2/Me" and method == "GET":  # who the token is: the SDK's current_user.me
            return self.answer(request, 200, {"id": "1", "userName": "stub@example.com", "active": True})
        if path == "/api/2.0/mlflow/experiments/get-by-name":  # a workspace without that experiment yet
            return self.answer(request, 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "No experiment."})
        return self.missing(request, path)

    def answer(self, request: BaseHTTPRequestHandler, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def invalid(self, request: BaseHTTPRequestHandler, said: str) -> None:
        self.answer(request, 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": said})

    def missing(self, request: BaseHTTPRequestHandler, what: str) -> None:
        self.answer(request, 404, {"error_code": "NOT_FOUND", "message": f"{what} does not exist."})

    def files(self, request: BaseHTTPRequestHandler, method: str, remote: str, body: bytes) -> None:
        path = self.local(remote)
        if method == "PUT":
            # This request's body (train jobs upload at once), written whole outside the volume, then moved in.
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.root.parent / f"{self.root.name}.partial" / str(threading.get_ident())
            partial.parent.mkdir(exist_ok=True)
            partial.write_bytes(body)
            partial.replace(path)
            return self.answer(request, 200, {})
        if method == "DELETE":
            path.unlink(missing_ok=True)
            return self.answer(request, 200, {})
        if not path.is_file():
            return self.missing(request, remote)
        data = path.read_bytes()
        request.send_response(200)
        request.send_header("Content-Type", "application/octet-stream")
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Last-Modified", formatdate(path.stat().st_mtime, usegmt=True))
        request.end_headers()
        if method == "GET":
            request.wfile.write(data)

    def directories(self, request: BaseHTTPRequestHandler, method: str, remote: str) -> None:
        path = self.local(remote.rstrip("/"))
        if method == "PUT":
            path.mkdir(parents=True, exist_ok=True)
            return self.answer(request, 200, {})
        if not path.is_dir():
            return self.missing(request, remote)
        contents = [
            {"path": f"{remote.rstrip('/')}/{entry.name}", "name": entry.name, "is_directory": entry.is_dir(),
             **({} if entry.is_dir() else {"file_size": entry.stat().st_size})}
            for entry in sorted(path.iterdir())
        ] + self.listed.get(remote.rstrip("/"), [])  # fmt: skip
        return self.answer(request, 200, {"contents": contents})

    def existing(self, cluster_id: str, node_type_id: str, spark_version: str = "16.4.x-gpu-ml-scala2.12") -> None:
        """An all-purpose cluster the workspace already has, running."""
        self.clusters[cluster_id] = {"cluster_id": cluster_id, "node_type_id": node_type_id, "num_workers": 1,
                                     "spark_version": spark_version, "state": "RUNNING", "gets": 0}  # fmt: skip

    def cluster(self, request: BaseHTTPRequestHandler, method: str, verb: str, query: str, body: bytes) -> None:
        if verb == "list-node-types" and method == "GET":
            return self.answer(request, 200, {"node_types": self.node_types})
        if verb == "create" and method == "POST":
            if said := malformed_request(json.loads(body), compute.ClustersAPI.create):
                return self.invalid(request, said)
            cluster_id = f"0101-000000-stub{len(self.clusters):04d}"
            self.clusters[cluster_id] = {**json.loads(body), "cluster_id": cluster_id, "state": "PENDING",
                                         "state_message": "Finding instances", "gets": 0}  # fmt: skip
            return self.answer(request, 200, {"cluster_id": cluster_id})
        if verb == "get" and method == "GET":
            cluster = self.clusters.get(parse_qs(query)["cluster_id"][0])
            if cluster is None:
                return self.missing(request, "cluster")
            cluster["gets"] += 1
            if cluster["state"] == "PENDING" and cluster["gets"] >= self.starts_after:
                cluster.update(state="RUNNING", state_message="")
            return self.answer(request, 200, {k: v for k, v in cluster.items() if k != "gets"})
        cluster = self.clusters.get(json.loads(body).get("cluster_id"))
        if cluster is None:
            return self.missing(request, "cluster")
        if verb == "delete" and method == "POST":
            if cluster["state"] != "TERMINATED":
                cluster.update(state="TERMINATED", state_message="Terminated by user",
                               termination_reason={"code": "USER_REQUEST", "type": "SUCCESS"})  # fmt: skip
            return self.answer(request, 200, {})
        if verb == "start" and method == "POST":
            if cluster["state"] != "TERMINATED":
                said = f"Cluster {cluster['cluster_id']} is in unexpected state {cluster['state']}."
                return self.answer(request, 400, {"error_code": "INVALID_STATE", "message": said})
            cluster.update(state="PENDING", state_message="Starting", gets=0)
            cluster.pop("termination_reason", None)
            return self.answer(request, 200, {})
        return self.missing(request, f"{CLUSTERS}/{verb}")

    def output(self, request: BaseHTTPRequestHandler, run_id: int) -> None:
        """A task run's output (``logs``: a spark_python_task's stdout and stderr); a run of tasks has none of its
        own, as the API answers for one."""
        if run_id in self.runs:
            return self.invalid(request, "Retrieving the output of runs with multiple tasks is not supported.")
        if run_id not in self.outputs:
            return self.missing(request, "run")
        parent = self.runs[run_id - TASK_RUNS]
        return self.answer(request, 200, {"logs": self.outputs[run_id], "metadata": parent})

    def idle(self, cluster_id: str) -> None:
        """The cluster terminated by its autotermination, as after its idle minutes."""
        self.clusters[cluster_id].update(state="TERMINATED", state_message="Inactive cluster terminated",
                                         termination_reason={"code": "INACTIVITY", "type": "SUCCESS"})  # fmt: skip

    def submit(self, request: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        run_id = 1000 + len(self.runs)
        existing = body["tasks"][0].get("existing_cluster_id")
        cluster_id = existing or f"job-cluster-{run_id}"
        # A submitted run's one task is a run of its own, whose id runs/get-output takes (TASK_RUNS apart).
        task = {"run_id": run_id + TASK_RUNS, "task_key": body["tasks"][0]["task_key"]}
        self.runs[run_id] = {"run_id": run_id, "run_page_url": f"{self.url}/#job/runs/{run_id}",
                             "state": {"life_cycle_state": "RUNNING", "state_message": "In run"},
                             "cluster_instance": {"cluster_id": cluster_id}, "tasks": [task]}  # fmt: skip
        if existing in self.clusters:
            self.runs[run_id]["cluster_state_at_submit"] = self.clusters[existing]["state"]
        self.ended[run_id] = threading.Event()
        threading.Thread(target=self.execute, args=(run_id, body), daemon=True).start()
        self.answer(request, 200, {"run_id": run_id})

    def execute(self, run_id: int, body: dict[str, Any]) -> None:
        # A runner may give the task's output too (stdout and stderr), which runs/get-output answers with.
        result, message, *output = self.runner(body, self.root) if self.runner else ("SUCCESS", "")
        self.outputs[run_id + TASK_RUNS] = output[0] if output else ""
        run = self.runs[run_id]
        if run["state"].get("result_state") != "CANCELED":
            run["state"] = {"life_cycle_state": "TERMINATED", "result_state": result, "state_message": message}
        run["end_time"] = int(time.time() * 1000)
        self.ended[run_id].set()
