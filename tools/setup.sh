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
core=envs/requirements.lock
dev=envs/requirements-dev.lock
locks=("$core")
optional=(--optional "$dev")
if [[ "${1:-}" == "--dev" ]]; then
    locks+=("$dev")
    optional=()
fi

tools/profiles.sh

# A venv set up with --dev also serves a plain set-up (the dev lock only adds packages).
stamp="$VENV/.snakeddp-locks"
fingerprint() { cat "$@" pyproject.toml | sha256sum | cut -d' ' -f1; }
want=$(fingerprint "${locks[@]}")
if [[ -f "$stamp" ]]; then
    have=$(cat "$stamp")
    if [[ "$have" == "$want" || ("${#locks[@]}" == 1 && "$have" == "$(fingerprint "$core" "$dev")") ]]; then
        exit 0
    fi
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --quiet --disable-pip-version-check)
# The locks are complete (every transitive dependency, exact versions), so no resolver runs:
# what gets installed is exactly what the locks say.
"${pip[@]}" install --no-deps $(printf -- '-r %s ' "${locks[@]}")
# torch is locked by version; the build is the machine's (this machine's wheel cache has the CPU
# build). A CUDA build needs its runtime wheels (nvidia-*), which this adds; for a CPU build
# every requirement is already met and nothing changes.
"${pip[@]}" install "$(grep '^torch==' "$core")" -c "$core"
"${pip[@]}" install --no-deps -e .
# Packages in neither lock (left by an older lock, or installed by hand) go, so the venv is
# exactly the locks.
extra=$(PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock extra "$core" "$dev")
if [[ -n "$extra" ]]; then
    echo "setup: removing packages that no lock names: $(echo $extra)"
    "${pip[@]}" uninstall --yes $extra
fi
"$VENV/bin/python" -m pip check
PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock verify "${locks[@]}" "${optional[@]}"
echo "$want" > "$stamp"
echo "setup: $VENV matches ${locks[*]}"
