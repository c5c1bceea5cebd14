"""What a remote platform's train job keeps of one run, under ``results/runs/<run>/<platform>/``.

    <platform>/code/              what the job runs: the snakeddp package, its entry among it
                                  (snakeddp.remote.entry; each platform adds its own files)
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

import snakeddp
from snakeddp.run.layout import RunPaths
from snakeddp.util.fsutil import atomic_write_json, read_json

RECORD_FILE = "submission.json"
#: The job-side entry in the code snapshot, for a platform whose task names a file to run.
ENTRY = "snakeddp/remote/entry.py"


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

    def snapshot(self) -> Path:
        """A fresh copy of what the job runs, in ``code``: the snakeddp package this process imported, which
        holds the job's entry (snakeddp.remote.entry), without compiled files; the code folder."""
        if self.code.exists():
            shutil.rmtree(self.code)
        package = Path(snakeddp.__file__).resolve().parent
        shutil.copytree(package, self.code / "snakeddp", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return self.code

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
