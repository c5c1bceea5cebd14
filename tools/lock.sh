#!/usr/bin/env bash
# Regenerate envs/requirements.lock, envs/requirements-dev.lock, envs/requirements-azureml-v1.lock and each torch
# build's envs/requirements-torch-<cuda>.lock from the .in files with `uv pip compile --generate-hashes`, then the
# per-stage conda YAMLs from them (python -m snakeddp.environment.files write). The one way the locks are written:
# the same .in files and index give the same bytes, so after a merge (conflicts in the locks included) this one
# command writes them again.
#   tools/lock.sh             # keep every version the old locks have, except what the .in files change
#   tools/lock.sh --upgrade   # resolve everything afresh (newest versions the pins allow)
# To add or remove one package, tools/add.sh does this and the rest (docs/environments.md).
# Both locks are resolved together first, so a package shared by the core and the extras
# (packaging, python-dateutil, ...) has one version in both; the core lock is then the subset a
# core-only install pulls in, constrained to that resolution. pip took 11 minutes for this; uv seconds.
# Nothing is written when a resolution holds a release envs/denied.toml denies or its index marks yanked.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: tools/lock.sh [--upgrade]   (the locks from the .in files; --upgrade: every version newest, within the pins)"
upgrade=()
while (($#)); do
    case $1 in
        --upgrade) upgrade=(--upgrade) ;;
        -h | --help) echo "$usage"; exit 0 ;;
        *) echo "lock: unknown option $1; nothing was locked. HINT: $usage" >&2; exit 2 ;;
    esac
    shift
done
source tools/progress.sh
source tools/uv.sh
source tools/python.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# For the Python the locks are for (its markers): names, versions, every file's sha256 and the index each came from.
compile=("$uv" pip compile --python "$PYTHON" --no-header --no-annotate --generate-hashes --emit-index-annotation
    --override envs/requirements-overrides.txt)
machine=$(uname -m)

# The helpers need packaging, which the Python running this may lack: a venv of their own (a second, from uv's cache),
# compiled, as every helper imports it (with PYTHONDONTWRITEBYTECODE=1 each compiled it again: 0.1 s of CPU a re-lock).
"$uv" venv --quiet --python "$PYTHON" "$work/tool"
cached_first "$uv" pip install --quiet --compile-bytecode --python "$work/tool/bin/python" "packaging>=24"
helper() { PYTHONPATH=src "$work/tool/bin/python" -m "$@"; }
# One start (snakeddp.environment.locking prepare) writes what the resolutions start from, fifteen before:
# uv never resolves a denied release ($work/denied.txt), and a pin of one is refused by name here, before uv
# says "no solution". Without --upgrade the old locks are uv's preferences (an existing output file: $work/all.txt,
# v1-kept.txt, each build-<cuda>.txt), so a re-lock after adding or bumping one package leaves the rest alone
# unless the new pins need otherwise. Not torch: the lock's torch==2.13.0 as a preference is PyPI's CUDA build
# (and its cuda-*/nvidia-* wheels); the .in's pin lets the machine's own build (find-links' 2.13.0+cpu) win, as a
# fresh resolution does. A lock left with a merge's conflict markers gives what both sides agree on.
prepared=0
helper snakeddp.environment.locking prepare envs "$work" "${upgrade[@]}" || prepared=$?
if ((prepared == 1)); then
    echo "lock: an .in file pins a denied release (above); the locks are unchanged." >&2
fi
((prepared == 0)) || exit "$prepared"
# The cooldown (envs/cooldown.toml): uv takes no release uploaded after its cutoff; the locks' headers say it (both
# from prepare's one reading of the clock: a re-lock across midnight UTC said another cutoff than uv was given).
mapfile -t cooldown < "$work/cooldown-args.txt"
((${#cooldown[@]})) || exit 2
compile+=("${cooldown[@]}")
: > "$work/v1.txt"
# uv's warnings (a yanked release) are read afterwards; its errors are shown as they are, but a pin the cooldown
# refuses, which is said in one line (the package, when it was published, the HINT), and nothing is written.
resolve() {
    local log=$1; shift
    if ! "${compile[@]}" "$@" 2>"$work/$log.log" >/dev/null; then
        helper snakeddp.environment.cooldown explain "$work/$log.log" || exit 1
        # A name the index does not know (a typo): said as such, not as a conflict of pins.
        local unknown
        # uv wraps its words to the terminal's width: read them as one line.
        unknown=$(tr -s '[:space:]' ' ' <"$work/$log.log" | grep -o 'Because [^ ]* was not found in the package registry' | head -1 | cut -d' ' -f2)
        if [[ -n $unknown ]]; then
            echo "lock: the package index has no package named $unknown (uv: \"$unknown was not found in the package registry\"); the locks are unchanged. HINT: check the name (its page is https://pypi.org/project/$unknown/ if it exists), then run tools/add.sh with it again" >&2
            exit 1
        fi
        grep -v '^Resolved ' "$work/$log.log" >&2
        return 1
    fi
}
# Offline first, from the pages uv's cache holds, kept only where the answer was already decided: every package
# it holds at a version an exact pin allows, in the .in files or the old locks (adding a package the dev lock
# has, a version bump, a re-lock after a merge). This machine's index sends no cache headers, so online uv
# reads every page again: 4-13 s of CPU a resolution, three a re-lock. Where anything was left to choose (a
# package named without a version, one new to the locks, --upgrade), the index is asked, for its newest.
#   settled LOG OUTPUT DECIDED... -- UV_ARGS...   (OUTPUT is UV_ARGS' --output-file; its old content, uv's
#   preferences, is put back for the online resolution)
settled() {
    local log=$1 output=$2 decided=()
    shift 2
    while [[ $1 != -- ]]; do decided+=("$1"); shift; done
    shift
    cp "$output" "$work/$log.kept"
    if "${compile[@]}" --offline "$@" 2>"$work/$log.log" >/dev/null \
        && helper snakeddp.environment.locking undecided "$output" --by "$work/$log.kept" "${decided[@]}" >/dev/null; then
        return 0
    fi
    cp "$work/$log.kept" "$output"
    resolve "$log" "$@"
}
all=(envs/requirements.in envs/requirements-dev.in --constraint "$work/denied.txt" --output-file "$work/all.txt")
if ! settled all "$work/all.txt" envs/requirements.in envs/requirements-dev.in -- "${all[@]}"; then
    echo "lock: envs/requirements.in and envs/requirements-dev.in have no solution (uv's reason above); the locks are unchanged. HINT: change the pin uv names, or tools/lock.sh --upgrade" >&2
    exit 1
fi
# Every version the core may take is pinned by that resolution: offline, the same answer (online where the cache
# lacks a page).
core=(envs/requirements.in --constraint "$work/all.txt" --constraint "$work/denied.txt" --output-file "$work/core.txt")
"${compile[@]}" --offline "${core[@]}" 2>"$work/core.log" >/dev/null || resolve core "${core[@]}"

# SDK v1: a complete lock of its own (its venv installs it alone), at the core and dev locks' versions where
# they fit (its own old lock first, without --upgrade). Not constrained to the core lock: a package added to the
# core (tools/add.sh adlfs brings cryptography 50) may pass azureml-core's caps (pyopenssl: cryptography<47).
# Its old lock decides too: a package where it and the dev lock differ (cryptography, pathspec) is left out of the
# preferences, and was asked of the index in every re-lock (0.4 s of CPU, and the network's wait).
v1_in=envs/requirements-azureml-v1.in
helper snakeddp.environment.locking preferences "$work/v1-kept.txt" "$work/core.txt" "$work/all.txt" > "$work/v1.txt"
v1=(envs/requirements.in "$v1_in" --constraint "$work/denied.txt" --output-file "$work/v1.txt")
if ! settled v1 "$work/v1.txt" envs/requirements.in "$v1_in" "$work/v1-kept.txt" -- "${v1[@]}"; then
    echo "lock: envs/requirements.in and $v1_in have no solution (uv's reason above); the locks are unchanged. HINT: change the pin uv names in $v1_in" >&2
    exit 1
fi

# torch's builds (environment.cuda), each resolved for Linux on this machine's architecture with the core's
# versions: PyPI's (13.0) without find-links, so it is PyPI's files that are hashed, with the CUDA runtime
# wheels it adds; the others from PyTorch's index, where it answers. A build that cannot be resolved here is
# written as not locked, with the reason, and refused by every installer: no hash is made up.
torch=$(grep -m1 -E '^torch==' "$work/core.txt" | sed -E 's/^torch==([0-9][^+ ]*).*/\1/')
awk '/^[A-Za-z0-9]/{skip=0} /^torch==/{skip=1} !skip' "$work/core.txt" > "$work/core-without-torch.txt"
platform="$machine-manylinux_2_28"
pytorch_answers=$("$work/tool/bin/python" - <<'EOF'
import urllib.request
try:
    urllib.request.urlopen("https://download.pytorch.org/whl/", timeout=5)
    print("yes")
except Exception as error:  # any failure: the index does not answer here
    print(" ".join(str(getattr(error, "reason", error)).split())[:120])
EOF
)
# Each build's old lock is its preferences (its runtime wheels kept, as the other locks keep theirs; prepare wrote
# them), and an offline resolution is kept where that lock, the pin and the core decided every package (settled,
# above). Read into an array first: uv and the helpers inside the loop would read a redirected stdin.
mapfile -t builds < "$work/builds.txt"
for line in "${builds[@]}"; do
    read -r cuda label index <<<"$line"
    build=(--python-platform "$platform" "$work/build-$cuda.in" --constraint "$work/core-without-torch.txt"
        --constraint "$work/denied.txt" --output-file "$work/build-$cuda.txt")
    if [[ $label == "-" ]]; then
        pin="torch==$torch"
        echo "$pin" > "$work/build-$cuda.in"
        (unset UV_FIND_LINKS; settled "build-$cuda" "$work/build-$cuda.txt" "$work/build-$cuda.in" "$work/core-without-torch.txt" -- "${build[@]}") 2>/dev/null \
            || echo "uv could not resolve $pin from PyPI for $platform ($(grep -v '^\s*$' "$work/build-$cuda.log" | tail -n 1))" > "$work/build-$cuda.missing"
    elif [[ $pytorch_answers != "yes" ]]; then
        echo "$index did not answer when tools/lock.sh ran ($pytorch_answers)" > "$work/build-$cuda.missing"
    else
        pin="torch==$torch+$label"
        echo "$pin" > "$work/build-$cuda.in"
        (unset UV_FIND_LINKS; settled "build-$cuda" "$work/build-$cuda.txt" "$work/build-$cuda.in" "$work/core-without-torch.txt" -- \
            "${build[@]}" --index-url "$index" --extra-index-url https://pypi.org/simple) 2>/dev/null \
            || echo "uv could not resolve $pin from $index ($(grep -v '^\s*$' "$work/build-$cuda.log" | tail -n 1))" > "$work/build-$cuda.missing"
    fi
    if [[ -f "$work/build-$cuda.missing" ]]; then rm -f "$work/build-$cuda.txt"; fi
done

# One lock serves every Python tools/python.sh takes: each other one resolves the core and dev .in files to the same
# packages at the same versions, torch as PyPI's build (this machine's find-links torch is cp311's; a find-links
# wheel for every Python, a test's, is taken as here), or nothing is written. Offline first, from the pages just read.
# (The SDK v1's venv is this Python's only.)
here=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
awk '/^[A-Za-z0-9]/{skip=0} /^torch==/{skip=1} !skip' "$work/all.txt" > "$work/all-without-torch.txt"
others=() resolved=()
for version in "${SUPPORTED_PYTHONS[@]}"; do
    [[ $version != "$here" && -f "$work/build-13.0.txt" ]] || continue
    cached_first "${compile[@]}" --quiet --python-version "$version" --python-platform "$platform" \
        envs/requirements.in envs/requirements-dev.in --constraint "$work/all-without-torch.txt" \
        --constraint "$work/build-13.0.txt" --constraint "$work/denied.txt" --output-file "$work/all-$version.txt" \
        || { echo "lock: the .in files have no solution on Python $version (uv's reason above); the locks are unchanged." >&2; exit 1; }
    others+=("$version")
    resolved+=("$work/all-$version.txt")
done
if ((${#others[@]})); then
    helper snakeddp.environment.locking same "${resolved[@]}" --as "$work/all-without-torch.txt" \
        "$work/build-13.0.txt" --python "${others[@]}" --here "$here" || exit 1
fi

pythons=$(echo "${SUPPORTED_PYTHONS[*]}" | sed 's/ /, /g; s/, \([^,]*\)$/ and \1/')
helper snakeddp.environment.locking write "$work" "$work/out" --python "$pythons" --machine "$machine Linux" \
    --cooldown "$(cat "$work/cooldown-header.txt")"
# PEP 751's pylock.toml beside each lock, from the lock itself (every version pinned, so uv chooses nothing; the same
# cutoff, so it names no file the resolution could not see), for the Pythons tools/python.sh takes: offline from the
# pages just read. Each lock then keeps the hashes of the files its pylock names (uv hashed cp310's too).
# Find-links only where the locks took a package from one (a wheel a user added): this machine's CPU torch would
# otherwise be a second torch there, by a path no other machine has.
pylock() {
    local out=$1 links
    shift
    links=$(sed -n 's|^    # from \(file://.*\)|\1|p' "$@" | sort -u | paste -sd, -)
    (unset UV_FIND_LINKS; [[ -z $links ]] || export UV_FIND_LINKS=$links
        cached_first "$uv" pip compile --quiet --no-header --universal --no-deps \
        --python-version "${SUPPORTED_PYTHONS[0]}" --format pylock.toml "${cooldown[@]}" "$@" --output-file "$out")
}
pylock "$work/out/pylock.requirements.toml" "$work/out/requirements.lock"
pylock "$work/out/pylock.requirements-dev.toml" "$work/out/requirements.lock" "$work/out/requirements-dev.lock"
pylock "$work/out/pylock.requirements-azureml-v1.toml" "$work/out/requirements-azureml-v1.lock"
helper snakeddp.environment.locking agree "$work/out"
# Nothing denied, nothing yanked, or nothing written.
if ! helper snakeddp.environment.advisories check "$work"/out/*.lock --yanked "$work"/*.log --where lock; then
    echo "lock: the resolution holds the releases above; the locks are unchanged." >&2
    exit 1
fi
mv "$work"/out/*.lock "$work"/out/pylock.*.toml envs/
echo "lock: $(grep -c '^[A-Za-z0-9]' envs/requirements.lock) core + $(grep -c '^[A-Za-z0-9]' envs/requirements-dev.lock) dev +" \
    "$(grep -c '^[A-Za-z0-9]' envs/requirements-azureml-v1.lock) SDK v1 packages, every file hashed;" \
    "torch builds: $(for f in envs/requirements-torch-*.lock; do b=${f#envs/requirements-torch-}; b=${b%.lock}; if grep -q '^torch==' "$f"; then echo -n "$b locked "; else echo -n "$b NOT LOCKED "; fi; done)"
# Where an advisory service answers, the locks are checked against it too; where none does, one line says so.
auditor=.venv/bin/python
[[ -x $auditor ]] || auditor=$work/tool/bin/python
PYTHONPATH=src "$auditor" -m snakeddp.environment.advisories audit envs/requirements.lock envs/requirements-dev.lock envs/requirements-azureml-v1.lock \
    || echo "lock: the locks are written, and an advisory service lists releases in them (above): move them with tools/add.sh" >&2

# The stage YAMLs pin each stage's dependency closure, read from the metadata of the packages just resolved, as the
# core lock installs them. What the venv (of this Python) already holds so is read there; the rest (a package just
# added, what it brings) and the YAMLs' own PyYAML and packaging are linked into a throwaway venv from uv's cache,
# never compiled; offline first, as the resolutions just read every page it needs. The whole core lock linked into
# it, and removed again, took 1.1 s of CPU in each re-lock.
"$uv" venv --quiet --python "$PYTHON" "$work/core"
hashed_requirements --python "$work/core/bin/python" envs/requirements.lock > "$work/core-requirements.txt"
venv_site=${VENV:-.venv}/lib/python$here/site-packages
sites=()
if [[ -d $venv_site ]]; then
    helper snakeddp.environment.locking unheld "$work/core-requirements.txt" --site "$venv_site" --keep pyyaml packaging \
        > "$work/core-unheld.txt"
    sites=(--site "$work/core/lib/python$here/site-packages" --site "$venv_site")
else
    cp "$work/core-requirements.txt" "$work/core-unheld.txt"
fi
cached_first "$uv" pip install --quiet --no-deps --require-hashes --python "$work/core/bin/python" -r "$work/core-unheld.txt"
PYTHONPATH=src "$work/core/bin/python" -m snakeddp.environment.files write "${sites[@]}"
