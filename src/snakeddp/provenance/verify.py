"""Check a finished run's files against its provenance: checkpoints, the data manifest, every
partition, and the user's own model and DataModule files.

Only checksums are computed; no checkpoint is ever loaded (``torch.load`` of a file that may have
been swapped is code execution). A run verifies when every checkpoint provenance lists still has
its recorded sha256 and size, the manifest still has the sha256 the run trained from, and every
partition and the validation file still match the manifest's entries (data.source module has none: its
record is checked), every user module file still has the sha256 it trained with, and this node's installed
packages are the files the bill of materials of the environment it trained in lists (every file of every
package hashed again: once per bill of materials in one ``snakeddp verify``). Checkpoints of an earlier attempt
that ``snakeddp prune`` removed (its pruned.json names them) are shown as pruned, not as a mismatch; so are those
of an earlier attempt whose checkpoints/ is gone whole with no pruned.json, as prune left them before it wrote one
(``run.runs.pruned_unrecorded``). A dataset that ``snakeddp prune --data`` removed (results/data/pruned.json names
it and the manifest's sha256, and its folder is gone) is shown as pruned too, without its partitions' checks.

A failure ends in one line whose HINT says what to do for each kind of file that failed, with the command to
type where there is one (``util.rerun``); ``snakeddp verify`` of every run prints that line once, after all runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp.config import flatten, run_identity
from snakeddp.data.partitions import DataIntegrityError, load_manifest, verify_file
from snakeddp.environment import sbom
from snakeddp.errors import ConfigError, ProvenanceError
from snakeddp.provenance.schema import problems
from snakeddp.run import prunedata
from snakeddp.run.runfile import RunFile
from snakeddp.run.runs import (
    UNRECORDED_PRUNE,
    Run,
    listed_checkpoints,
    pruned_paths,
    pruned_unrecorded,
    pruned_when,
    retrain_hint,
)
from snakeddp.util import rerun
from snakeddp.util.fsutil import read_json
from snakeddp.util.hashing import entry_checksum, sha256_file
from snakeddp.util.paths import inside

# sha256 and BLAKE3 release the GIL, so a few threads hash several partitions at disk speed.
HASH_THREADS = 4


@dataclass(frozen=True)
class Check:
    """One file checked against what provenance (or the manifest) says it was."""

    kind: str
    path: str
    ok: bool
    detail: str
    #: A checkpoint `snakeddp prune` removed (ok: what the attempt's pruned.json says happened to it).
    pruned: bool = False

    @property
    def shown(self) -> str:
        return "pruned" if self.pruned else "ok" if self.ok else "MISMATCH"


def _file_check(kind: str, path: Path, record: Mapping[str, Any]) -> Check:
    if not path.is_file():
        return Check(kind, str(path), False, "missing")
    size = path.stat().st_size
    if size != record["bytes"]:
        return Check(kind, str(path), False, f"size {size} bytes, provenance says {record['bytes']}")
    actual = sha256_file(path)
    if actual != record["sha256"]:
        return Check(kind, str(path), False, f"sha256 {actual[:16]}…, provenance says {record['sha256'][:16]}…")
    return Check(kind, str(path), True, f"sha256 {actual[:16]}…")


def checkpoint_checks(run: Run) -> list[Callable[[], Check]]:
    pruned = run.pruned
    removed = pruned_paths(pruned)
    unrecorded = pruned_unrecorded(run.paths, run.provenance)

    def check(record: Mapping[str, Any]) -> Check:
        path = run.file(record)
        if record["path"] in removed and not path.exists():
            return Check("checkpoint", str(path), True, f"pruned {pruned_when(pruned)} ({run.paths.pruned.name})", True)
        if unrecorded:
            return Check("checkpoint", str(path), True, f"pruned, as far as can be told: {UNRECORDED_PRUNE}", True)
        return _file_check("checkpoint", path, record)

    return [lambda r=record: check(r) for record in listed_checkpoints(run.provenance)]


def _partition_check(path: Path, entry: Mapping[str, Any], kind: str) -> Check:
    try:
        verify_file(path, entry)
    except DataIntegrityError as exc:
        return Check(kind, str(path), False, str(exc).split(" HINT:")[0].removeprefix(f"{path}: "))
    algorithm, digest = entry_checksum(entry)
    return Check(kind, str(path), True, f"{algorithm} {digest[:16]}…")


def data_checks(run: Run) -> tuple[Check, list[Callable[[], Check]]]:
    """The manifest's own check, and one check per partition it lists (train and val)."""
    try:
        path = run.manifest_path
    except ProvenanceError as exc:
        return Check("manifest", str(run.provenance["data"]["manifest"]), False, str(exc).split(" HINT:")[0]), []
    expected = run.provenance["data"]["manifest_sha256"]
    if not path.is_file():
        results = run.paths.run_dir.parent.parent
        if gone := prunedata.pruned_dataset(results, path, expected):
            said = f"data pruned {prunedata.pruned_when(gone)} ({prunedata.record_path(results)})"
            return Check("manifest", str(path), True, said, pruned=True), []
        return Check("manifest", str(path), False, "missing"), []
    actual = sha256_file(path)
    if actual != expected:
        manifest = Check("manifest", str(path), False, f"sha256 {actual[:16]}…, provenance says {expected[:16]}…")
    else:
        manifest = Check("manifest", str(path), True, f"sha256 {actual[:16]}…")
    if run.provenance["config"]["data"].get("source") == "module":
        return manifest, []  # the record of a DataModule that reads its own data: no partitions
    try:
        content = load_manifest(path)
    except DataIntegrityError as exc:
        return Check("manifest", str(path), False, str(exc)), []
    entries = [(entry, "partition") for entry in content["train"]] + [(content["val"], "validation")]
    return manifest, [lambda e=e, k=k: _partition_check(path.parent / e["file"], e, k) for e, k in entries]


def run_file_check(run: Run) -> Check:
    """run.yaml must hold the config the run trained: a later run_config job (an edit, a second
    invocation) can rewrite it, and the next train job would then not be this run's."""
    path = run.paths.run_file
    try:
        written = run_identity(RunFile.load(path).config)
    except (OSError, ConfigError) as exc:
        return Check("run config", str(path), False, str(exc).split(" HINT:")[0].removeprefix(f"{path}: "))
    written, trained = flatten(written), flatten(run_identity(run.provenance["config"]))
    differ = sorted(key for key in written.keys() | trained.keys() if written.get(key) != trained.get(key))
    if differ:
        return Check("run config", str(path), False, f"differs from the config it trained at {', '.join(differ[:5])}")
    return Check("run config", str(path), True, "the config this run trained")


def _code_check(run: Run, record: Mapping[str, Any]) -> Check:
    # An installed package's module is recorded by its absolute path, outside the workflow's
    # directory; it is only hashed, never imported or loaded.
    path = Path(record["file"])
    if not path.is_absolute():
        try:
            path = run.resolve(record["file"])
        except ProvenanceError as exc:
            return Check("user code", record["file"], False, str(exc).split(" HINT:")[0])
    if not path.is_file():
        return Check("user code", str(path), False, "missing")
    actual = sha256_file(path)
    if actual != record["sha256"]:
        return Check("user code", str(path), False, f"sha256 {actual[:16]}…, provenance says {record['sha256'][:16]}…")
    return Check("user code", str(path), True, f"sha256 {actual[:16]}… ({record['target']})")


def code_checks(run: Run) -> list[Callable[[], Check]]:
    """The module files of the user's own model and DataModule the run trained with."""
    records = run.provenance.get("user_code") or []
    return [lambda r=record: _code_check(run, r) for record in records if record.get("file") and record.get("sha256")]


# One bill of materials is checked once per process: every run of a sweep names the same one, and checking
# hashes every installed file (1.2 GB with torch).
_CHECKED: dict[str, Check] = {}


def environment_check(run: Run) -> Check | None:
    """This node's installed files against the SBOM beside the environment record the run trained with."""
    record_name = run.provenance["environment"].get("record")
    if not record_name:
        return None
    try:
        record_path = run.resolve(record_name)
        record = read_json(record_path) if record_path.is_file() else {}
    except (ProvenanceError, OSError, ValueError):
        return None
    bom_record = record.get("sbom") if isinstance(record, dict) else None
    if not isinstance(bom_record, dict) or not bom_record.get("file"):
        return None  # a record written before records held one
    path = inside(record_path.parent, bom_record["file"])
    if path is None or not path.is_file():
        return Check("installed", str(record_path.parent / str(bom_record["file"])), False, "missing")
    digest = sha256_file(path)
    if digest != bom_record.get("sha256"):
        return Check(
            "installed", str(path), False, f"sha256 {digest[:16]}…, the record says {bom_record['sha256'][:16]}…"
        )
    if digest not in _CHECKED:
        checked, differences = sbom.check(read_json(path))
        if differences:
            shown = "; ".join(f"{d.component}: {d.detail}" for d in differences[:3])
            more = f"; {len(differences) - 3} more" if len(differences) > 3 else ""
            _CHECKED[digest] = Check("installed", str(path), False, f"this node differs: {shown}{more}")
        else:
            _CHECKED[digest] = Check(
                "installed", str(path), True, f"{checked} packages' installed files match (this node: {sys.prefix})"
            )
    return _CHECKED[digest]


def verify_run(run: Run) -> list[Check]:
    """Every check of one run, schema first, then checkpoints, manifest and partitions."""
    schema = problems(run.provenance)
    checks = [Check("provenance", str(run.paths.provenance), not schema, "; ".join(schema) or "schema ok")]
    if schema:  # the files it names cannot be trusted, or even found
        return checks
    if run.is_current:
        checks.append(run_file_check(run))
    manifest, partitions = data_checks(run)
    with ThreadPoolExecutor(HASH_THREADS) as pool:
        hashed = list(pool.map(lambda check: check(), [*checkpoint_checks(run), *partitions, *code_checks(run)]))
    kinds = {"checkpoint": 0, "manifest": 1, "partition": 2, "validation": 3, "user code": 4}
    environment = environment_check(run)
    return checks + sorted([manifest, *hashed], key=lambda c: kinds[c.kind]) + ([environment] if environment else [])


def format_checks(run: Run, checks: list[Check], hint: bool = True) -> str:
    """The checks of one run, a line each, then its verdict: one line, with the HINT for what failed unless
    ``hint`` is off (several runs: ``verdict`` says it once for all)."""
    lines = [f"snakeddp verify {run.label} ({run.run_dir})"]
    width = max(len(c.kind) for c in checks)
    for check in checks:
        lines.append(f"  {check.shown:8}  {check.kind:{width}}  {check.path}  {check.detail}")
    bad = [c for c in checks if not c.ok]
    pruned = sum(c.pruned for c in checks if c.kind == "checkpoint")
    if bad:
        said = f"verify: {len(bad)} of {len(checks)} checks failed: these files are not what run {run.label} recorded."
        lines.append(f"{said} HINT: {what_to_do([(run, bad)])}." if hint else said)
    else:
        how = "as its pruned.json records" if run.pruned else "as far as can be told: no pruned.json records it"
        notes = [f"{pruned} checkpoint(s) pruned, {how}"] if pruned else []
        notes += [f"its {check.detail}" for check in checks if check.pruned and check.kind == "manifest"]
        note = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"verify: all {len(checks)} checks passed; run {run.label} matches its provenance{note}.")
    return "\n".join(lines)


def verdict(results: list[tuple[Run, list[Check]]]) -> str:
    """The last line of ``snakeddp verify`` of several runs: how many match, which do not, and what to do."""
    failed = [(run, [c for c in checks if not c.ok]) for run, checks in results]
    failed = [(run, bad) for run, bad in failed if bad]
    if not failed:
        return f"verify: all {len(results)} runs match their provenance."
    names = ", ".join(run.label for run, _ in failed)
    return (
        f"verify: {len(failed)} of {len(results)} runs do not match their provenance ({names}; their MISMATCH lines "
        f"are above). HINT: {what_to_do(failed)}."
    )


def _relative(run: Run, path: str) -> str:
    """A path of a check as the user types it in the directory the workflow ran in."""
    try:
        return Path(path).resolve().relative_to(run.workdir.resolve()).as_posix()
    except ValueError:
        return path


def _remade_by(run: Run, path: Path) -> str:
    """What to delete and ask Snakemake for to have a data file or manifest again: itself, or a table's summary
    (ingest.json), whose job, its ingestion, writes all the table's files."""
    dataset = path.parent.parent if path.parent.name == "train" else path.parent
    summary = dataset / "ingest.json"
    return _relative(run, str(summary if summary.is_file() else path))


def _remake(data: list[tuple[Run, Check]]) -> str:
    """How mismatched data files and manifests are made again, with the command for the first."""
    targets = sorted({_remade_by(run, Path(check.path)) for run, check in data})
    first, others = targets[0], targets[1:]
    if first.endswith("/ingest.json"):
        lead = "a table's data files are its ingestion's: delete its summary and ask Snakemake for it, which ingests"
    else:
        lead = "delete a mismatched data file or manifest and ask Snakemake for it, which writes"
    more = f" (the same for {', '.join(others[:3])}{', …' if len(others) > 3 else ''})" if others else ""
    return f"{lead} it again: {data[0][0].typed_here(f'rm {first} && {rerun.snakemake(first)}')}{more}"


def what_to_do(failed: list[tuple[Run, list[Check]]]) -> str:
    """What to do for each kind of file that failed, in the runs given with their failed checks."""
    kinds: dict[str, list[tuple[Run, Check]]] = {}
    for run, bad in failed:
        for check in bad:
            kinds.setdefault(check.kind, []).append((run, check))

    def current(kind: str) -> list[str]:
        return list(dict.fromkeys(run.rerun_target for run, _ in kinds.get(kind, []) if run.is_current))

    said = []
    if "provenance" in kinds:
        if targets := current("provenance"):
            said.append(
                "a provenance.json that fails its schema is written again by its train job: "
                f"{failed[0][0].typed_here(rerun.forcing(*targets))}"
            )
        if any(not run.is_current for run, _ in kinds["provenance"]):
            said.append("an earlier attempt's record is not written again: restore it from a copy")
    data = [(run, check) for kind in ("manifest", "partition", "validation") for run, check in kinds.get(kind, [])]
    if data:
        said.append(_remake(data))
    if "checkpoint" in kinds:
        said.append("never load a mismatched checkpoint")
        if targets := current("checkpoint"):
            said.append(
                f"train {'the run' if len(targets) == 1 else 'those runs'} again with "
                f"{failed[0][0].typed_here(rerun.forcing(*targets))} (the "
                "attempt with those checkpoints is kept under attempts/, record and all)"
            )
        kept = {run.label: run for run, _ in kinds["checkpoint"] if not run.is_current}
        said += [f"{label}: {retrain_hint(run)}" for label, run in kept.items()]
    if "run config" in kinds:
        said.append(
            "run.yaml was written again after the run trained (another config or invocation wrote it): the run's "
            "next train job trains the config it holds and keeps this attempt under attempts/"
        )
    if "user code" in kinds:
        said.append(
            "restore a changed model or DataModule file from version control, as the run's record hashed it (changed, "
            "it is new code, which no record of this run describes)"
        )
    if "installed" in kinds:
        said.append(
            "this node's packages differ from those the run trained with: reinstall that environment (tools/setup.sh, "
            "or rebuild its conda env or image)"
        )
    return "; ".join(said) or "restore the files from a copy"
