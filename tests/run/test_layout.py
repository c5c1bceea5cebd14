"""snakeddp.run.layout: the one owner of a run directory's file names."""

from __future__ import annotations

import ast
import sys

from snakeddp.run import layout
from snakeddp.run.layout import AttemptPaths, RunPaths, paths_of, run_records, train_log
from tests.helpers import REPO

PACKAGE = REPO / "src" / "snakeddp"
# Names that only ever mean a file of a run directory: any path-like string holding one is a leak.
FILE_NAMES = {
    layout.RUN_FILE,
    layout.PROVENANCE,
    layout.FINISHED,
    layout.STATE,
    layout.METRICS,
    layout.LAST_CHECKPOINT,
    layout.FAILURE,
    layout.LOCK,
    layout.RESUME_SEEDED,
}
# Folder names that are also ordinary words and keys (config["tracking"], files["checkpoints"]):
# a leak only where used as a path (joined with /, or inside a path string) or named as a constant.
FOLDER_NAMES = {layout.CHECKPOINTS, layout.ATTEMPTS, layout.TRACE, layout.TRACKING}


def _prose(tree: ast.AST) -> set[int]:
    """Strings standing alone as statements: docstrings of modules, classes, functions and fields."""
    return {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def run_directory_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string in ``source`` that names a run-directory file or folder as a path.

    Prose (a string with whitespace: messages, help texts) and docstrings may mention the names.
    """
    tree = ast.parse(source)
    prose = _prose(tree)
    path_operands = {
        id(side)
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
        for side in (node.left, node.right)
    }
    constants = set()  # the values of NAME = "..." and NAMES = ("...", ...)
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, ast.Assign | ast.AnnAssign) and any(
            isinstance(t, ast.Name) and t.id.isupper() for t in targets
        ):
            value = node.value
            elements = value.elts if isinstance(value, ast.Tuple | ast.List | ast.Set) else [value]
            constants |= {id(element) for element in elements}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in prose:
            continue
        text = node.value
        if any(char.isspace() for char in text):
            continue
        segments = set(text.split("/"))
        as_path = "/" in text or id(node) in path_operands or id(node) in constants
        if segments & FILE_NAMES or (as_path and segments & FOLDER_NAMES):
            found.append((node.lineno, text))
    return found


def test_only_layout_names_run_directory_files():
    leaks = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "run" / "layout.py"
        for line, text in run_directory_literals(path.read_text())
    ]
    assert not leaks, "run-directory names outside snakeddp.run.layout (ask RunPaths instead):\n" + "\n".join(leaks)


def test_the_check_finds_each_kind_of_leak():
    leaks = [
        'path = run_dir / "metrics.csv"',
        'glob = f"{results}/runs/*/provenance.json"',
        'last = run_dir / "checkpoints" / name',
        'TRACE_DIR = "trace"',
        'KEPT = ("metrics.csv", "tracking")',
        'pattern = "attempts/*"',
        'lock = ".attempt.lock"',
    ]
    for line in leaks:
        assert run_directory_literals(line), line
    fine = [
        'config["tracking"]',
        'files["checkpoints"] = []',
        'PHASES = {"checkpoint_s": "checkpoints"}',
        'say(f"no provenance.json came back into {run_dir}")',
        'def f():\n    """Writes provenance.json and last.ckpt."""',
        "x = RunPaths(run_dir).provenance",
    ]
    for line in fine:
        assert not run_directory_literals(line), line


def test_layout_imports_only_the_standard_library():
    tree = ast.parse((PACKAGE / "run" / "layout.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {name.split(".")[0] for name in imported} <= {*sys.stdlib_module_names, "__future__"}, imported


def test_run_paths(tmp_path):
    paths = RunPaths.under(tmp_path / "results", "lr-0.1")
    run_dir = tmp_path / "results" / "runs" / "lr-0.1"
    assert paths.folder == run_dir and paths.run_dir == run_dir and not paths.is_kept
    assert paths.run_file == run_dir / "run.yaml"
    assert paths.provenance == run_dir / "provenance.json"
    assert paths.finished == run_dir / "finished.json"
    assert paths.state == run_dir / "run-state.json"
    assert paths.metrics == run_dir / "metrics.csv"
    assert paths.last_checkpoint == run_dir / "checkpoints" / "last.ckpt"
    assert paths.trace_file(1) == run_dir / "trace" / "rank-1.jsonl"
    assert paths.tracking_state == run_dir / "tracking" / "state.json"
    assert paths.failure == run_dir / "failure.txt" and paths.lock == run_dir / ".attempt.lock"
    assert paths.platform("azureml") == run_dir / "azureml", "a platform keeps its files under its name"
    assert train_log(tmp_path, "lr-0.1") == tmp_path / "logs" / "train" / "lr-0.1.log"

    kept = paths.attempt("0123456789ab")
    assert isinstance(kept, AttemptPaths) and not isinstance(kept, RunPaths)
    assert kept.folder == run_dir / "attempts" / "0123456789ab" and kept.is_kept and kept.run_dir == run_dir
    assert kept.provenance == kept.folder / "provenance.json"
    assert paths_of(kept.folder) == kept and paths_of(run_dir) == paths


def test_finding_records(tmp_path):
    results = tmp_path / "results"
    for run_id in ("b", "a"):
        paths = RunPaths.under(results, run_id)
        paths.folder.mkdir(parents=True)
        paths.provenance.write_text("{}")
    RunPaths.under(results, "unfinished").folder.mkdir()
    kept = RunPaths.under(results, "a").attempt("0123456789ab")
    kept.checkpoints.mkdir(parents=True)
    kept.provenance.write_text("{}")
    for name in ("epoch001-val_loss0.5000.ckpt", "last.ckpt", ".last.ckpt.partial"):
        (kept.checkpoints / name).write_bytes(b"")
    assert run_records(results) == [RunPaths.under(results, r).provenance for r in ("a", "b")]
    assert RunPaths.under(results, "a").kept_records() == [kept.provenance]
    assert [p.name for p in kept.checkpoint_files()] == ["epoch001-val_loss0.5000.ckpt", "last.ckpt"]
