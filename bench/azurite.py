"""Azurite, Microsoft's Azure Storage emulator (npm package ``azurite``), for the benchmark and the tests of
tables in Azure Blob Storage (tests/data/test_remote.py): installed with npm into a cache on first use (a
fresh machine needs only Node and npm), started on 127.0.0.1 with its well-known development account,
stopped at the end. It lives in bench because bench imports no test module, while the tests import bench's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

VERSION = "3.37.0"
CACHE = Path(os.environ.get("SNAKEDDP_TEST_CACHE", Path.home() / ".cache" / "snakeddp-tests")) / f"azurite-{VERSION}"
ACCOUNT = "devstoreaccount1"
# Microsoft's published key of the emulator's development account (Azurite's README): not a secret.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def install() -> Path:
    """The azurite-blob program, installed into CACHE unless it already is."""
    program = CACHE / "node_modules" / ".bin" / "azurite-blob"
    if not program.is_file():
        npm = shutil.which("npm")
        assert npm, "the Azure Blob tests install Azurite with npm, which is not on PATH: install Node.js and npm"
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", f"azurite@{VERSION}"],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
    return program


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Azurite:
    """One Azurite blob server, data under ``location``."""

    def __init__(self, location: Path) -> None:
        self.port = free_port()
        location.mkdir(parents=True, exist_ok=True)
        argv = [str(install()), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", str(location)]
        self.process = subprocess.Popen(
            [*argv, "--silent", "--skipApiVersionCheck", "--loose"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"azurite-blob exited: {self.process.stderr.read().decode()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError("azurite-blob did not listen within 60 s")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    def connection_string(self, key: str = KEY) -> str:
        return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={self.endpoint};"

    def upload(self, container: str, name: str, data: bytes | IO[bytes]) -> str:
        """Put ``data`` (bytes, or a file streamed in blocks) at container/name, creating the container;
        return the object's ETag."""
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(self.connection_string())
        box = service.get_container_client(container)
        if not box.exists():
            box.create_container()
        return box.upload_blob(name, data, overwrite=True).get_blob_properties().etag

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
