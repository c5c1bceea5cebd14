"""A real Google Cloud Storage server on 127.0.0.1 for the tests of gs:// tables: gcp-storage-emulator's (an
independent implementation of the GCS JSON API, from the dev lock), run in a thread of the test process, its
objects in memory. Clients reach it through STORAGE_EMULATOR_HOST and, as with Google's own client, send no
credentials: the emulator checks none, so refused credentials cannot be shown against it (tests/data/
test_remote_gcs.py says what is tested instead)."""

from __future__ import annotations

from pathlib import Path

from bench.azurite import free_port


class GCSServer:
    def __init__(self, home: Path) -> None:
        from gcp_storage_emulator.server import create_server

        self.home = home  # where the tests' gcloud configuration goes, so none of the machine's is read
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = create_server("127.0.0.1", self.port, in_memory=True)
        self.server.start()

    def env(self) -> dict[str, str]:
        """The variables that reach this server, and no gcloud configuration or metadata server of the machine's."""
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "CLOUDSDK_CONFIG": str(self.home / "gcloud"),
            "NO_GCE_CHECK": "true",
        }

    def upload(self, bucket: str, key: str, data: bytes) -> str:
        """Put ``data`` at bucket/key, creating the bucket; return the object's generation."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(
            project="snakeddp-tests", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint}
        )
        holder = client.lookup_bucket(bucket) or client.create_bucket(bucket)
        blob = holder.blob(key)
        blob.upload_from_string(data)
        return str(blob.generation)

    def stop(self) -> None:
        self.server.wipe()
        self.server.stop()
