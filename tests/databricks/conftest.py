"""What the Databricks tests share: the local workspace stub, answering to the test module's TOKEN."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.databricks_server import DatabricksStub


@pytest.fixture
def stub(request: pytest.FixtureRequest, tmp_path: Path):
    server = DatabricksStub(tmp_path / "workspace", request.module.TOKEN)
    yield server
    server.close()
