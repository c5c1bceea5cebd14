"""The package's floors: a subpackage imports only from floors below it (lazy imports included), and the
top of ``src/snakeddp`` holds only the entry points and ``errors``. The same graph as
``python3 ../shared/tools/import-cycles.py src/snakeddp --packages``, checked on every run."""

from __future__ import annotations

import ast
import re

from tests.helpers import SRC

PACKAGE = SRC / "snakeddp"
# Lowest first. A room may import from rooms on lower floors (and its own); same-floor rooms not at all.
FLOORS = [
    {"errors"},
    {"util", "compat", "platforms"},  # platforms: the registry, the table of platforms and their job sides
    {"config", "forking"},  # forking: what the warm process and the supervisor's forked ranks share
    {"data", "environment", "contract"},  # contract: what each platform implements, its hooks taking config's parts
    {"run"},
    {"cluster"},
    {"warm"},
    {"provenance"},
    {"training"},
    {"report"},
    {"remote"},  # the sequence a remote platform's train job follows, and the folder it keeps
    {"local", "slurm", "azureml", "databricks", "spark"},  # the platforms: none imports another
    {"workflow"},
    {"cli", "launch", "steps", "train"},
]
# Imports that go up a floor, each with its reason; at most three may exist.
UPWARD = {
    # A spark rank's script (torchrun runs a file, not a module) hands over to the training entry point.
    ("spark", "train"),
}
ENTRY_POINTS = {"cli", "launch", "steps", "train"}


def room_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


def imports() -> set[tuple[str, str, str]]:
    """(importing room, imported room, file) for every import of one snakeddp room by another."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                prefix = base[: len(base) - node.level + 1] if node.level else []
                target = ".".join([*prefix, *([node.module] if node.module else [])])
                targets = [target] + ([f"{target}.{a.name}" for a in node.names] if target == "snakeddp" else [])
            else:
                continue
            for target in targets:
                if room_of(target) in {"__version__", "schemas"}:  # the version string; data files
                    continue
                if target.startswith("snakeddp.") and room_of(target) != room_of(module) and room_of(module):
                    found.add((room_of(module), room_of(target), str(path.relative_to(SRC))))
    return found


def floor(room: str) -> int:
    return next(index for index, rooms in enumerate(FLOORS) if room in rooms)


def test_every_room_has_a_floor_and_the_top_holds_only_entry_points_and_errors():
    rooms = {p.stem if p.suffix else p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed")}
    rooms -= {"__init__", "schemas"}  # the package's docstring and its data files (py.typed: PEP 561's marker)
    assert rooms == set().union(*FLOORS)
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == ENTRY_POINTS | {"errors"} and len(top) <= 6


def test_no_room_imports_from_its_own_floor_or_above_except_the_named_few():
    upward = {(a, b) for a, b, _ in imports() if floor(b) >= floor(a)}
    assert upward == UPWARD, sorted(f"{a} -> {b} ({f})" for a, b, f in imports() if (a, b) in upward - UPWARD)
    assert len(UPWARD) <= 3


def test_each_package_says_what_it_may_import():
    """A package's docstring ends with what it may import: the rooms of the floors below its own (a platform's
    package only through the registry, above the platforms' floor), so a reader learns the rule where they start."""
    platforms = FLOORS[floor("local")]
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        room = init.parent.name
        if room == "schemas":  # data files
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import:" in doc, f"{init}: no 'May import:' line in its docstring"
        said = " ".join(doc[doc.index("May import:") :].split())
        allowed, _, upward = said.partition("going up a floor,")
        below = set().union(*FLOORS[: floor(room)]) - (platforms if floor(room) > floor("local") else set())
        assert set(re.findall(r"``(\w+)``", allowed.split("; a platform's")[0])) == below, init
        assert set(re.findall(r"``(\w+)``", upward)) == {b for a, b in UPWARD if a == room}, init


def test_no_function_is_over_80_lines():
    """A function a reader can hold at once (issue 73): cut a longer one into the steps a reader would name."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.relative_to(SRC)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long
