#!/usr/bin/env bash
# Add a package to the environment, or change or remove one, in one command (seconds to a minute):
# it writes the exact pin into envs/requirements.in, re-locks (tools/lock.sh: both locks and the
# stages' conda YAMLs; the Dockerfile installs the lock itself), syncs .venv (tools/setup.sh) and
# imports what the stages import, naming any package that breaks an import.
#   tools/add.sh humanize                  # the newest version that fits the lock, for the train stage
#   tools/add.sh humanize==4.16.0          # that version
#   tools/add.sh humanize --stage report   # for the report stage's conda env (repeatable)
#   tools/add.sh azure-ai-ml azure-identity --stage train   # several packages at once
#   tools/add.sh --remove humanize
# The HINT of a missing optional package (adlfs, s3fs, gcsfs, mlflow-skinny, wandb, the AzureML SDKs, ...)
# is this command: the package then stays through every later set-up, at the version envs/requirements-dev.lock
# already pins (the old locks are the resolver's preferences).
# .venv gets every package whatever the stage; the stage picks which envs/<stage>.yaml pins it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
usage="usage: tools/add.sh NAME[==VERSION]... [--stage data|train|report]... | tools/add.sh --remove NAME"
if [[ $# -eq 0 ]]; then
    echo "add: no package named. HINT: $usage" >&2
    exit 2
fi

# Everything add changes, kept to be put back if the new package does not resolve.
kept=$(mktemp -d)
trap 'rm -rf "$kept"' EXIT
# Every stage YAML, one per torch build for the stages that import torch (snakeddp.environment.files).
derived=(envs/requirements.in envs/requirements.lock envs/requirements-dev.lock envs/requirements-azureml-v1.lock envs/*.yaml
    envs/pylock.*.toml envs/requirements-torch-*.lock)
cp "${derived[@]}" "$kept/"
restore() { for file in "${derived[@]}"; do cp "$kept/$(basename "$file")" "$file"; done; }
# Ctrl-C (or a kill) before the locks are written leaves envs/ as it was, as a failed re-lock does: the .in file edited
# and the locks not would pass make lint's check (it compares the YAMLs with the locks, not the locks with the .in).
interrupted() {
    restore
    echo "add: stopped before the locks were written; envs/ is as it was. HINT: run the same tools/add.sh command again" >&2
    exit 130
}
trap interrupted INT TERM

# The .in file is edited with this checkout's code and packaging (the venv's, or the first Python's).
python=$VENV/bin/python
[[ -x "$python" ]] || python=$PYTHON
edit() { PYTHONPATH=src "$python" -m snakeddp.environment.requirements "$@"; }
if [[ "$1" == "--remove" ]]; then
    [[ $# -eq 2 ]] || { echo "add: --remove takes one name. HINT: $usage" >&2; exit 2; }
    edit remove envs/requirements.in "$2"
else
    requirements=()
    stages=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --stage) [[ $# -ge 2 ]] || { echo "add: --stage needs a stage. HINT: $usage" >&2; exit 2; }; stages+=(--stage "$2"); shift 2 ;;
            -*) echo "add: unexpected argument '$1'. HINT: $usage" >&2; exit 2 ;;
            *) requirements+=("$1"); shift ;;
        esac
    done
    [[ ${#requirements[@]} -gt 0 ]] || { echo "add: no package named. HINT: $usage" >&2; exit 2; }
    # A release envs/denied.toml denies is refused before anything changes, naming its advisory.
    PYTHONPATH=src "$python" -m snakeddp.environment.advisories requirement "${requirements[@]}" || exit 2
    for requirement in "${requirements[@]}"; do
        if ! edit add envs/requirements.in "$requirement" "${stages[@]}"; then
            restore
            exit 2
        fi
    done
fi
# lock.sh says why it failed, in uv's words and one line of its own (a denied or yanked release in the
# resolution, by name); envs/ is then put back as it was.
if ! tools/lock.sh; then
    restore
    exit 1
fi
# A package named without a version is pinned at the version just resolved.
edit pin envs/requirements.in envs/requirements.lock
# The locks agree with the .in file from here: an interrupted set-up is repaired by running it again.
trap - INT TERM
tools/setup.sh
