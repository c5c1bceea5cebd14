"""A dataset's files, named relative to its folder (``results/data/<dataset>/``): the train partitions in
``train/``, then validation. Ingestion writes them there, the workflow asks for them there, and a run's stream
waits for them there, so the names are spelled once."""

from __future__ import annotations

#: The train partitions' folder: a table's ingestion writes it whole (one directory output), every other
#: dataset one partition at a time.
TRAIN = "train"
VALIDATION = "val"
#: Left by a table's ingestion that failed (no output of its rule: Snakemake removes those), naming the workflow
#: invocation it failed in: a run training beside it stops at once instead of waiting out the stall (data.stream).
INGEST_FAILED = ".ingest-failed.json"
#: The environment variable that holds the invocation's id (listed with the others in snakeddp.run.variables).
INVOCATION = "SNAKEDDP_INVOCATION"


def partition_file(index: int) -> str:
    """Train partition ``index``'s file name inside ``TRAIN``, without its suffix (``.safetensors``, ``.json`` for
    its entry)."""
    return f"part-{index:05d}"


def train_partition(index: int) -> str:
    """Train partition ``index``'s name relative to the dataset, without its suffix."""
    return f"{TRAIN}/{partition_file(index)}"


def targets(partitions: int) -> list[str]:
    """Every file's name an ingestion writes, without suffix: the train partitions in order, then validation."""
    return [train_partition(index) for index in range(partitions)] + [VALIDATION]
