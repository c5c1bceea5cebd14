"""The workflow's own files that a report's RO-Crate carries (what the Snakefile runs)."""

from __future__ import annotations

from pathlib import Path

# Relative to the workflow's directory; the Snakefile itself is the crate's main entity.
WORKFLOW_GLOBS = ("Snakefile", "rules/*.smk", "envs/*.yaml", "envs/*.lock", "config/schema.yaml")


def workflow_files(repo: str | Path) -> list[Path]:
    """The workflow's files that exist, Snakefile first."""
    repo = Path(repo)
    return [path for pattern in WORKFLOW_GLOBS for path in sorted(repo.glob(pattern)) if path.is_file()]
