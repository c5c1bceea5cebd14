"""docs/development.md's "A new platform, step by step" names every file a new platform touches: each file
its table names exists for a platform shipped with snakeddp (Databricks: remote, with settings, an SDK and
its docs) and for the toy, and the toy has no file the table leaves out."""

from __future__ import annotations

import re

from tests.helpers import REPO

GUIDE = REPO / "docs" / "development.md"
TOY = REPO / "tests" / "platforms" / "toy"
#: The shipped platform the table's NAME stands for here: the one that touches every row.
FULLEST = "databricks"


def table() -> list[tuple[str, list[str], list[str]]]:
    """The step table's rows: (step, the shipped platform's files, the toy's files)."""
    text = GUIDE.read_text()
    section = text[text.index("### A new platform, step by step") :]
    rows = []
    for line in section[section.index("| step |") :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        step, shipped, toy = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((step, re.findall(r"`([^`]+)`", shipped), re.findall(r"`([^`]+)`", toy)))
    return rows


def test_the_table_names_the_steps_the_issue_asks_for():
    named = {path for _, shipped, _ in table() for path in shipped}
    assert {"src/snakeddp/NAME/settings.py", "src/snakeddp/platforms/table.py", "pyproject.toml"} <= named
    assert {"envs/requirements-dev.lock", "profiles/NAME/config.yaml", "tests/test_floors.py"} <= named
    assert "shared run directory" in GUIDE.read_text(), "a multi-node remote job's run directory is said"


def test_every_file_the_table_names_exists_for_a_shipped_platform_and_the_toy():
    missing = [
        path
        for _, shipped, toy in table()
        for path in [name.replace("NAME", FULLEST) for name in shipped] + toy
        if not (REPO / path).exists()
    ]
    assert not missing, missing


def test_the_toy_has_no_file_the_table_leaves_out():
    files = {
        str(path.relative_to(REPO)) for path in TOY.rglob("*") if path.is_file() and "__pycache__" not in path.parts
    }
    listed = {path for _, _, toy in table() for path in toy}
    assert files and files <= listed, sorted(files - listed)
