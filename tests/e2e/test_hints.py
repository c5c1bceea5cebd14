"""Every HINT that tells the user to do something, done literally, gives what it promises."""

import pytest

from snakeddp import config
from tests.conftest import Workflow

pytestmark = pytest.mark.e2e

RUN = "results/runs/base"


def hint_line(text: str, what: str) -> str:
    """The error line that names ``what`` and carries a HINT."""
    lines = [line for line in text.splitlines() if what in line and "HINT:" in line]
    assert lines, text[-3000:]
    return lines[-1]


@pytest.mark.parametrize("name", ["train/part-00002.safetensors", "val.safetensors"])
def test_damaged_data_file_deleted_as_hinted_is_regenerated_identically_and_training_completes(
    workflow: Workflow, tiny_config, name
):
    workflow.write_config(tiny_config)
    dataset = workflow.directory / "results/data" / config.dataset_id(config.validate(tiny_config)["data"])
    workflow.run(str(dataset.relative_to(workflow.directory) / "manifest-3.json"))
    target = dataset / name
    original = target.read_bytes()
    damaged = bytearray(original)
    damaged[-1] ^= 0x01
    target.write_bytes(bytes(damaged))

    failed = workflow.run(f"{RUN}/provenance.json", check=False)
    assert failed.returncode != 0
    line = hint_line((workflow.directory / "logs/train/base.log").read_text(), name)
    assert "sha256 checksum mismatch" in line
    assert "HINT: delete the file and rerun snakemake to regenerate it" in line

    target.unlink()
    workflow.run(f"{RUN}/provenance.json")
    assert target.read_bytes() == original
    assert (workflow.directory / RUN / "provenance.json").is_file()
