#!/usr/bin/env bash
# Create .venv with exactly the versions in envs/requirements.lock (plus the dev/test lock with
# --dev) and install snakeddp itself in editable mode. Safe to rerun: it does nothing when the
# venv already matches the locks. Installs with uv (pinned, bootstrapped on first use) and links
# the profiles so that `snakemake --profile local|slurm|azureml` works (tools/profiles.sh).
#   tools/setup.sh           # what `make run` needs
#   tools/setup.sh --dev     # plus test and lint tools and the optional extras the tests exercise
set -euo pipefail
cd "$(dirname "$0")/.."

source tools/progress.sh

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

source tools/uv.sh
into=(--python "$VENV/bin/python")
# Bytecode at install time: uv leaves compiling to the first import, and where
# PYTHONDONTWRITEBYTECODE=1 is set (CI machines, containers; this project's VMs) the .pyc files
# are never written, so every process compiled torch, Lightning and Snakemake from source again:
# `import lightning.pytorch` took 10 s instead of 5.5 s here. uv compiles all of site-packages.
compile=(--compile-bytecode)

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup: creating $VENV"
    "$uv" venv --quiet --seed --python "$PYTHON" "$VENV"
fi
echo "setup: installing ${locks[*]} into $VENV"
# The locks are complete (every transitive dependency, exact versions), so no resolver runs:
# sync installs exactly what the locks say and removes what they do not.
# uv reports its downloads, then compiles every package's bytecode without a word.
progress "installing and compiling the locked packages" "$uv" pip sync "${into[@]}" "${compile[@]}" "${locks[@]}"
# torch is locked by version; the build is the machine's (this machine's wheel cache has the CPU
# build). A CUDA build needs its runtime wheels (nvidia-*), which this adds; for a CPU build
# every requirement is already met and nothing changes.
progress "installing torch's build" "$uv" pip install --quiet "${into[@]}" "${compile[@]}" "$(grep '^torch==' "$core")" \
    --constraint "$core"
"$uv" pip install --quiet "${into[@]}" --no-deps -e .
# snakeddp's own modules (an editable install: compiled here, in src/, where the imports find them).
progress "compiling src/" "$VENV/bin/python" -m compileall -q src
# Left by the venv's seed (wheel) or a lock older than the venv: the venv is exactly the locks.
extra=$(PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock extra "$core" "$dev")
if [[ -n "$extra" ]]; then
    echo "setup: removing packages that no lock names: $(echo $extra)"
    "$uv" pip uninstall --quiet "${into[@]}" $extra
fi
"$uv" pip check "${into[@]}"
PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock verify "${locks[@]}" "${optional[@]}"
echo "$want" > "$stamp"
echo "setup: $VENV matches ${locks[*]}"
