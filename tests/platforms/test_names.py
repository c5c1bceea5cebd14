"""A platform is its package: outside it, no code names it (issue 52).

Every identifier and string constant of the package (docstrings and comments aside: they may say where a
thing comes from), of the Snakefile and of every rule file is scanned for each platform's name. A name may
appear in its own package, in the table (snakeddp/platforms/table.py), in the registry that loads the rows
(snakeddp/platforms/__init__.py) and in compat/ (hooks into upstream packages named after platforms:
azureml-core, snakemake-executor-plugin-slurm). Everything else asks the registry (snakeddp.platforms).
A few uses name not the platform but something else that bears its name: each is listed in ELSEWHERE with why,
and the test fails when one of them no longer does, so the list cannot outgrow the code.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from snakeddp import platforms

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "snakeddp"
# "local" is an ordinary word in launcher variables (LOCAL_RANK), paths and Spark's local[N] master: the scan
# holds the platforms whose names say nothing else.
COMMON_WORDS = {"local"}
NAMES = tuple(name for name in platforms.names() if name not in COMMON_WORDS)
EVERYWHERE = ("platforms/table.py", "platforms/__init__.py", "compat/")
# (module, platform, what the name stands for there): a text that is that platform's name and not the platform.
ELSEWHERE = {
    ("environment/locking.py", "azureml"): "the AzureML SDK v1's own lock and venv (a package's, locked apart)",
    ("data/images.py", "spark"): "Spark's image struct, a table format (a Delta table's image columns)",
    ("data/columns.py", "spark"): "Spark's image struct, a table format",
    ("data/layout.py", "spark"): "Spark's binaryFile columns, a table format",
    ("run/mlflow_server.py", "databricks"): "MLflow's databricks tracking URI scheme",
}
# Within a platform's package, another's name where it is the service's own vocabulary.
VOCABULARY = {
    "databricks": re.compile(r"spark_version|spark-versions|spark_conf|spark_python_task|SparkPythonTask|spark\.[a-z]")
}


def _docstrings(tree: ast.AST) -> set[int]:
    """Every string that is a statement of its own: a docstring, or an attribute's (PEP 257)."""
    found = set()
    for node in ast.walk(tree):
        for child in node.body if isinstance(getattr(node, "body", None), list) else ():
            if (
                isinstance(child, ast.Expr)
                and isinstance(child.value, ast.Constant)
                and isinstance(child.value.value, str)
            ):
                found.add(id(child.value))
    return found


def python_words(source: str) -> list[tuple[int, str]]:
    """(line, text) of every identifier, import and string constant that is no docstring."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            words.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            words.append((node.lineno, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append((node.lineno, node.name))
        elif isinstance(node, ast.arg | ast.keyword) and node.arg:
            words.append((node.lineno, node.arg))
        elif isinstance(node, ast.alias):
            words.append((node.lineno, f"{node.name} {node.asname or ''}"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.append((node.lineno, node.module))
    return words


def snakemake_words(source: str) -> list[tuple[int, str]]:
    """(line, text) of every name and string of a Snakefile or rule file (its tokens: Snakemake's syntax is
    Python's tokens), comments aside."""
    kinds = {tokenize.NAME, tokenize.STRING, *(getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING),)}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(token.start[0], token.string) for token in tokens if token.type in kinds]


def naming(words: list[tuple[int, str]], names: tuple[str, ...]) -> list[tuple[str, int, str]]:
    return [(name, line, text) for line, text in words for name in names if name in text.lower()]


def package_hits() -> dict[tuple[str, str], list[tuple[int, str]]]:
    hits: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(EVERYWHERE):
            continue
        home = module.split("/")[0]
        for name, line, text in naming(python_words(path.read_text()), NAMES):
            if name == home or (home in VOCABULARY and VOCABULARY[home].search(text)):
                continue
            hits.setdefault((module, name), []).append((line, text))
    return hits


def test_no_module_names_a_platform_outside_its_package():
    hits = package_hits()
    stray = {where: found for where, found in hits.items() if where not in ELSEWHERE}
    assert not stray, "\n".join(f"{module}:{line} names {name}: {text!r}" for (module, name), found in stray.items()
                                for line, text in found)  # fmt: skip
    stale = set(ELSEWHERE) - set(hits)
    assert not stale, f"ELSEWHERE lists what the code no longer names: {sorted(stale)}"


@pytest.mark.parametrize("path", [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))], ids=lambda p: p.name)
def test_no_rule_names_a_platform(path):
    # The rules ask PLAN (snakeddp.workflow.plan), which asks the platform's contract.
    assert not naming(snakemake_words(path.read_text()), NAMES)


def test_the_scan_sees_what_it_must():
    """The scan itself: a name in code, a string or an import is found, one in a docstring or comment is not."""
    source = '''"""Slurm's docstring."""
import snakeddp.spark.jobside
x = "AZUREML_RUN_ID"  # databricks in a comment
def f(slurm_job):
    """databricks in a function's docstring."""
    return f"{x} on spark"
'''
    found = sorted({name for name, _, _ in naming(python_words(source), NAMES)})
    assert found == ["azureml", "slurm", "spark"]
    rule = 'rule x:\n    # slurm in a comment\n    params: p=PLAN.param("azureml")\n'
    assert [name for name, _, _ in naming(snakemake_words(rule), NAMES)] == ["azureml"]
