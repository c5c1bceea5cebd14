"""What a remote platform's train job keeps of one run, under ``results/runs/<run>/<platform>/``.

    <platform>/code/              what the job runs: the snakeddp package and its entry, run.yaml, the
                                  environment record (each platform adds its own)
    <platform>/resume/            the attempt the job resumes or continues (hard links), only when there is one
    <platform>/download/          what the job's run directory held when it ended, before it moves in
    <platform>/submission.json    the latest submission: the platform's job id and page, status, whether
                                  its files came back
    <platform>/...                the request as sent (job.yml, submit.json), each platform's own

Rewritten on each attempt; the run directory's own files stay where they are.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from snakeddp.run.layout import RunPaths
from snakeddp.util.fsutil import atomic_write_json, read_json

RECORD_FILE = "submission.json"


@dataclass(frozen=True)
class Folder:
    root: Path

    @classmethod
    def of(cls, run_dir: Path, platform: str) -> Folder:
        return cls(RunPaths(run_dir).platform(platform).resolve())

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def resume(self) -> Path:
        return self.root / "resume"

    @property
    def download(self) -> Path:
        return self.root / "download"

    def fresh_download(self) -> Path:
        """The download folder, emptied: nothing of an earlier job's copy is taken for this one's."""
        shutil.rmtree(self.download, ignore_errors=True)
        return self.download

    def record(self, fresh: bool = False, **fields: Any) -> Path:
        """Write ``fields`` into submission.json (the latest attempt); ``fresh`` starts it over."""
        path = self.root / RECORD_FILE
        current = read_json(path) if path.is_file() and not fresh else {}
        now = datetime.now(UTC).isoformat(timespec="seconds")
        return atomic_write_json(path, {**current, **fields, "updated_at": now})
