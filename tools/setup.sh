#!/usr/bin/env bash
# Create .venv with exactly the versions in envs/requirements.lock (plus the dev/test lock with
# --dev), install snakeddp itself in editable mode, and import what the stages import (naming the
# package that breaks an import). Safe to rerun: it does nothing when the venv still matches the
# locks, and repairs a venv changed by hand. Installs with uv (pinned, bootstrapped on first use)
# and links the profiles so that `snakemake --profile local|slurm|azureml` works (tools/profiles.sh).
#   tools/setup.sh           # what `make run` needs (keeps a venv set up with --dev a dev venv)
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
# Once set up with --dev, a venv stays one: a plain set-up after a lock change (tools/add.sh,
# make run) would otherwise remove the test tools.
dev_marker="$VENV/.snakeddp-dev"
if [[ "${1:-}" == "--dev" || -f "$dev_marker" ]]; then
    locks+=("$dev")
    optional=()
fi

tools/profiles.sh

# The stamp says which locks the venv was last set up (and import-checked) from; the venv itself is
# compared with them too (0.3 s), so a package removed or changed by hand is found and repaired.
stamp="$VENV/.snakeddp-locks"
fingerprint() { cat "$@" pyproject.toml | sha256sum | cut -d' ' -f1; }
want=$(fingerprint "${locks[@]}")
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    if drift=$(PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock drift "${locks[@]}" "${optional[@]}" 2>&1); then
        exit 0
    fi
    echo "setup: $VENV has changed since it was set up: ${drift:-its python does not start}; reinstalling from ${locks[*]}"
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
# Installed is not working: import what the stages import (about 7 s); the stamp is written only
# when they do, so the next set-up checks again.
rm -f "$stamp"
progress "importing what the stages import" env PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.imports
if [[ "${#locks[@]}" == 2 ]]; then touch "$dev_marker"; fi
echo "$want" > "$stamp"
echo "setup: $VENV matches ${locks[*]}"
