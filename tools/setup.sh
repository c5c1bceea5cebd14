#!/usr/bin/env bash
# Create .venv with exactly the versions in envs/requirements.lock (plus the dev/test lock with
# --dev) and install snakeddp itself in editable mode. Safe to rerun: it does nothing when the
# venv already matches the locks.
#   tools/setup.sh           # what `make run` needs
#   tools/setup.sh --dev     # plus test and lint tools and the optional extras the tests exercise
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
locks=(envs/requirements.lock)
if [[ "${1:-}" == "--dev" ]]; then
    locks+=(envs/requirements-dev.lock)
fi

stamp="$VENV/.snakeddp-locks"
want=$(cat "${locks[@]}" pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
# The locks are complete (every transitive dependency, exact versions), so no resolver runs:
# what gets installed is exactly what the locks say. torch comes from the CPU wheel where pip
# finds one (this machine's wheel cache); on GPU clusters use envs/Dockerfile instead.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps $(printf -- '-r %s ' "${locks[@]}")
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
"$VENV/bin/python" -m pip check
echo "$want" > "$stamp"
echo "setup: $VENV matches ${locks[*]}"
