#!/usr/bin/env bash
# The ranges stay true: resolve the newest releases pyproject.toml's ranges allow (the dependencies and every
# extra but azureml-v1, whose caps its own lock tests) into a scratch venv, .venv-newest, install snakeddp
# there and run the fast tests. torch stays at the lock's version (a newer torch from PyPI is the multi-GB
# CUDA build); the test tools and servers of envs/requirements-dev.in that the package does not name stay
# at their pins, so what moves is only what a `pip install snakeddp[...]` would move.
#   tools/newest.sh                   # torch as locked, the rest newest; the fast tests
#   tools/newest.sh --newest-torch    # torch newest too, where its build can be installed (a GPU machine)
#   tools/newest.sh -- tests/compat   # other pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/progress.sh
source tools/uv.sh
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-newest}
WORKERS=${WORKERS:-2}
usage="usage: tools/newest.sh [--newest-torch] [-- PYTEST_ARGS...]"
newest_torch=0
while (($#)); do
    case $1 in
        --newest-torch) newest_torch=1 ;;
        --) shift; break ;;
        *) echo "newest: unknown option $1. HINT: $usage" >&2; exit 2 ;;
    esac
    shift
done
# The fast tests, less those about the locked venv itself (it holds exactly the locks' versions), which
# this venv need not; the SDK v1 runs in its own venv from its lock (tests/azureml/test_sdk_v1.py), not here.
tests=("$@")
((${#tests[@]})) || tests=(-m "not e2e and not slurm and not gpu" --deselect tests/azureml/test_sdk_v1.py
    --deselect tests/environment/test_lock.py::test_the_venv_holds_exactly_the_locked_versions
    --deselect tests/environment/test_lock.py::test_verify_fails_when_the_lock_moves)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What the package names (dependencies and extras), read from pyproject.toml.
"$PYTHON" - "$work" <<'EOF'
import re, sys, tomllib
from pathlib import Path
work = Path(sys.argv[1])
project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
extras = [name for name in project["optional-dependencies"] if name != "azureml-v1"]
lines = [*project["dependencies"], *(line for name in extras for line in project["optional-dependencies"][name])]
names = {re.split(r"[<>=!~;\[ ]", line)[0].lower().replace("_", "-") for line in lines}
(work / "extras").write_text(" ".join(f"--extra {name}" for name in extras))
# The test tools and servers the package does not name, at envs/requirements-dev.in's pins.
tools = [
    line for line in Path("envs/requirements-dev.in").read_text().splitlines()
    if line.strip() and not line.startswith("#")
    and re.split(r"[<>=!~;\[ ]", line)[0].lower().replace("_", "-") not in names
]
(work / "tools.in").write_text("\n".join(tools) + "\n")
EOF
torch=$(grep '^torch==' envs/requirements.lock | cut -d' ' -f1)
if [[ $newest_torch == 1 ]]; then : > "$work/torch.txt"; else echo "$torch" > "$work/torch.txt"; fi
# No release envs/denied.toml denies, even where a range admits it (make lint holds the ranges too).
checker=.venv/bin/python
[[ -x $checker ]] || checker=$PYTHON
advisories() { PYTHONPATH=src "$checker" -m snakeddp.environment.advisories "$@"; }
advisories constraints > "$work/denied.txt"
# The release cooldown (envs/cooldown.toml), as tools/lock.sh and tools/add.sh apply it: a release uploaded after
# its cutoff is neither installed nor run here, on the machine the cooldown exists to keep it off.
mapfile -t cooldown < <(PYTHONPATH=src "$checker" -m snakeddp.environment.cooldown uv-args)
((${#cooldown[@]})) || exit 2

# shellcheck disable=SC2046 # the --extra flags are words
if ! "$uv" pip compile --quiet --python "$PYTHON" --no-header --no-annotate --upgrade pyproject.toml \
    $(cat "$work/extras") "$work/tools.in" --constraint "$work/torch.txt" --constraint "$work/denied.txt" \
    --override envs/requirements-overrides.txt "${cooldown[@]}" \
    --output-file "$work/newest.txt" 2>"$work/newest.log"; then
    cat "$work/newest.log" >&2
    echo "newest: pyproject.toml's ranges and envs/requirements-dev.in's test tools have no solution (uv's reason above). HINT: widen the range uv names, or move the test tool's pin" >&2
    exit 1
fi
# A yanked release (uv's warning) or a denied one stops here, by name.
if ! advisories check "$work/newest.txt" --yanked "$work/newest.log" --where newest; then
    echo "newest: the newest releases the ranges allow hold the releases above. HINT: give the range a ceiling (with the reason beside it)" >&2
    exit 1
fi
# What moved beyond the locks: the news this check is for.
"$PYTHON" - "$work/newest.txt" envs/requirements.lock envs/requirements-dev.lock <<'EOF'
import sys
def pins(path):
    lines = (line.split()[0] for line in open(path) if line[:1].isalnum())  # an entry's first line: name==version
    return dict(line.split("==", 1) for line in lines)
newest, locked = pins(sys.argv[1]), {**pins(sys.argv[2]), **pins(sys.argv[3])}
moved = [f"{name} {locked[name]} -> {version}" for name, version in sorted(newest.items())
         if name in locked and locked[name] != version.split("+")[0]]
print(f"newest: {len(newest)} packages, {len(moved)} newer than the locks" + (": " + ", ".join(moved) if moved else ""))
EOF

# Bytecode at install time, as tools/setup.sh does (tests/environment/test_lock.py checks it is there).
[[ -x "$VENV/bin/python" ]] || "$uv" venv --quiet --python "$PYTHON" "$VENV"
progress "installing the newest releases into $VENV" "$uv" pip sync --quiet --python "$VENV/bin/python" \
    --compile-bytecode "$work/newest.txt"
"$uv" pip install --quiet --python "$VENV/bin/python" --no-deps -e .
"$uv" pip check --python "$VENV/bin/python"
echo "newest: running pytest ${tests[*]} in $VENV"
"$VENV/bin/python" -m pytest -q -n "$WORKERS" --dist loadfile "${tests[@]}"
