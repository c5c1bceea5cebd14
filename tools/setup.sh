#!/usr/bin/env bash
# Create .venv with exactly the versions in envs/requirements.lock (plus the dev/test lock with
# --dev), install snakeddp itself in editable mode, and import what the stages import (naming the
# package that breaks an import). Safe to rerun: it does nothing when the venv still matches the
# locks, and repairs a venv changed by hand. Installs with uv (pinned, bootstrapped on first use)
# and links the profiles so that `snakemake --profile local|slurm|azureml` works (tools/profiles.sh).
#   tools/setup.sh           # what `make run` needs (keeps a venv set up with --dev a dev venv)
#   tools/setup.sh --dev     # plus test and lint tools and the optional extras the tests exercise
#   tools/setup.sh --cuda 12.6   # torch's build for those GPUs (default: config/config.yaml's environment.cuda)
#   tools/setup.sh --azureml-v1  # .venv-azureml-v1 from envs/requirements-azureml-v1.lock (azureml.sdk: v1)
set -euo pipefail
cd "$(dirname "$0")/.."

want_dev=0
want_v1=0
cuda=""
while (($#)); do
    case $1 in
        --dev) want_dev=1 ;;
        --azureml-v1) want_v1=1 ;;
        --cuda) cuda=${2:?--cuda needs a build: 13.0, 13.2, 12.6 or cpu}; shift ;;
        --cuda=*) cuda=${1#--cuda=} ;;
        *) echo "setup: unknown option $1. HINT: tools/setup.sh [--dev | --azureml-v1] [--cuda BUILD]" >&2; exit 2 ;;
    esac
    shift
done

source tools/progress.sh

# $PYTHON: one the locks are for (3.11, 3.12 or 3.13), else one line saying how to get one.
asked_python=${PYTHON:-}
source tools/python.sh
core=envs/requirements.lock
dev=envs/requirements-dev.lock
if [[ $want_v1 == 1 ]]; then
    [[ $want_dev == 0 ]] || { echo "setup: --dev and --azureml-v1 are two venvs. HINT: run tools/setup.sh --dev and tools/setup.sh --azureml-v1 one after the other" >&2; exit 2; }
    # The SDK v1's caps (pathspec<1, cryptography<47, ...) conflict with the other locks, so it has a venv of its
    # own, installed from its lock alone (complete, torch included).
    VENV=${VENV:-.venv-azureml-v1}
    core=envs/requirements-azureml-v1.lock
    dev=$core
else
    VENV=${VENV:-.venv}
fi
# A venv keeps the Python it was made from: one asked for by name (PYTHON=, make's SETUP_PYTHON=) that is another
# version is said in one line, before anything changes (the set-up did nothing and said nothing).
if [[ -n $asked_python && -x $VENV/bin/python ]]; then
    read -r venv_version _ <<<"$(python_version_of "$VENV/bin/python")"
    read -r asked_version _ <<<"$(python_version_of "$PYTHON")"
    if [[ -n ${venv_version:-} && $venv_version != "$asked_version" ]]; then
        echo "setup: $VENV is Python $venv_version, and PYTHON=$asked_python asks for Python $asked_version; a venv" \
            "keeps the Python it was made from, so nothing was changed. HINT: rm -rf $VENV, then run the same command" \
            "again (it makes $VENV from Python $asked_version); or leave PYTHON (SETUP_PYTHON) unset to keep" \
            "Python $venv_version" >&2
        exit 2
    fi
fi
locks=("$core")
optional=(--optional "$dev")
# Once set up with --dev, a venv stays one: a plain set-up after a lock change (tools/add.sh,
# make run) would otherwise remove the test tools.
dev_marker="$VENV/.snakeddp-dev"
if [[ $want_dev == 1 || -f "$dev_marker" ]]; then
    locks+=("$dev")
    optional=()
fi

# A lock that names a release envs/denied.toml denies (edited by hand or by a merge) is refused in one line per
# release, naming its advisory, before anything is created or installed; once the locks and the deny list pass,
# a stamp skips the check (0.17 s of CPU) until either changes. It needs packaging: the venv's, else the first
# Python's, else the one pip vendors in uv's own venv (a fresh machine's python3 may have neither).
denied_checked="$VENV/.snakeddp-denied"
deny_inputs() { cat "${locks[@]}" envs/requirements-torch-*.lock envs/denied.toml | sha256sum | cut -d' ' -f1; }
deny_check() {
    local python said vendored=""
    for python in "$VENV/bin/python" "${PYTHON:-python3}" ""; do
        [[ -n $python ]] || break
        "$python" -c 'import packaging' 2>/dev/null && break
    done
    if [[ -z $python ]]; then
        source tools/uv.sh
        python=$uv_home/bin/python
        vendored=$("$python" -c 'import os, pip._vendor as v; print(os.path.dirname(v.__file__))')
    fi
    if ! said=$(PYTHONPATH=src${vendored:+:$vendored} "$python" -m snakeddp.environment.advisories check \
        "${locks[@]}" envs/requirements-torch-*.lock 2>&1); then
        sed 's/^/setup: /' <<<"$said" >&2
        exit 2
    fi
    [[ ! -d $VENV ]] || deny_inputs >"$denied_checked"
}
[[ -f $denied_checked && "$(cat "$denied_checked")" == "$(deny_inputs)" ]] || deny_check

# The stamp says which locks the venv was last set up (and import-checked) from; the venv itself is
# compared with them too (0.3 s), so a package removed or changed by hand is found and repaired.
stamp="$VENV/.snakeddp-locks"
# The torch builds' own locks count too: each says which files its build may install.
fingerprint() { cat "$@" envs/requirements-torch-*.lock pyproject.toml | sha256sum | cut -d' ' -f1; }
# The torch build environment.cuda names (snakeddp.environment.venv_build): "<cuda> <pin> <index or -> <its lock>";
# a build whose lock has no hashes is refused there, in one line.
torch_build() { PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.venv_build --lock "$core" ${cuda:+--cuda "$cuda"}; }
# PyPI's build leaves the stamp as it was before builds were chosen; another is part of it.
stamp_of() { if [[ $3 == "-" ]]; then fingerprint "${locks[@]}"; else echo "$(fingerprint "${locks[@]}") cuda $1"; fi; }
want=$(fingerprint "${locks[@]}")
# Whether the venv holds the locks as they are: then a new torch build is all there is to install.
installed=0
if [[ -f "$stamp" && "$(cut -d' ' -f1 "$stamp")" == "$want" ]]; then
    build=$(torch_build) || exit 2
    want=$(stamp_of $build)
    if drift=$(PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock drift "${locks[@]}" "${optional[@]}" 2>&1); then
        [[ "$(cat "$stamp")" == "$want" ]] && installed=2
        ((installed == 2)) || installed=1
    else
        echo "setup: $VENV has changed since it was set up: ${drift:-its python does not start}; reinstalling from ${locks[*]}"
    fi
fi
# The profiles' notes on names kept (another checkout's, the user's own) come with a set-up that installs something,
# once (not again for the SDK v1's venv); a name newly linked is said whenever.
if ((installed == 2)) || [[ $want_v1 == 1 ]]; then tools/profiles.sh --quiet; else tools/profiles.sh; fi
((installed < 2)) || exit 0

source tools/uv.sh
into=(--python "$VENV/bin/python")
# What the venv was last installed and verified from: a package whose lock entry (version or hashes) changed
# since is fetched and checked again, since uv checks hashes only of what it installs, not of what is there.
verified="$VENV/.snakeddp-verified"
# uv's hash mismatch ("Hash mismatch for `six==1.16.0`", then the expected and computed digests, one per line)
# as one line: the package, what the lock expects, what the file has.
hash_failure() {
    awk -v locks="$*" '
        /Hash mismatch for `/ { match($0, /`[^`]+`/); pkg = substr($0, RSTART + 1, RLENGTH - 2) }
        /Expected:/ { mode = "e"; next }
        /Computed:/ { mode = "c"; next }
        /sha256:/ { gsub(/ /, ""); if (mode == "e") expected[++n] = $0; else if (mode == "c") found = $0 }
        END {
            if (pkg == "") exit 1
            want = expected[1]; for (i = 2; i <= n && i <= 3; i++) want = want ", " expected[i]
            if (n > 3) want = want " and " n - 3 " more"
            printf "setup: %s: %s expect%s %s, and the file uv got has %s: nothing was installed. HINT: if the lock is right, the file is not the one it was made from (a mirror or a cache: uv cache clean %s fetches it again); if the lock was changed, restore it (git checkout envs/) or write it again with tools/lock.sh\n", pkg, locks, (n > 1 ? " one of" : "s"), want, found, substr(pkg, 1, index(pkg, "==") - 1)
        }'
}
# A full disk or a read-only one in uv's words ("No space left on device (os error 28)", "Read-only file system
# (os error 30)", a dozen lines of causes) as one line: where, and the space left there. `disk_said LOG`.
disk_said() {
    local log=$1 dir free target
    if grep -qE 'os error 28|No space left on device' "$log"; then
        # The fullest of the places an install writes: the venv's disk, uv's cache, the temporary directory.
        read -r free target < <(for dir in "$(dirname "$(realpath -m "$VENV")")" "$("$uv" cache dir 2>/dev/null)" \
            "${TMPDIR:-/tmp}"; do df -B1 --output=avail,target "$dir" 2>/dev/null | tail -n +2; done | sort -n | head -1)
        echo "setup: the disk is full at $target ($(numfmt --to=iec "$free")B left), so $VENV is half installed. HINT:" \
            "free space on $target ($VENV takes about 2 GB with a CPU torch, more with a CUDA one), then run the same" \
            "command again: it repairs $VENV" >&2
        return 0
    fi
    if grep -qE 'os error 30|Read-only file system' "$log"; then
        target=$(df --output=target "$(dirname "$(realpath -m "$VENV")")" 2>/dev/null | tail -n +2)
        echo "setup: $VENV cannot be written: ${target:-its directory} is a read-only file system. HINT: clone the" \
            "checkout where you can write (git clone $PWD ~/snakeddp) and run the same command there, or remount" \
            "${target:-it} read-write" >&2
        return 0
    fi
    return 1
}
# Runs an install; a full or read-only disk and a hash mismatch are told in one line, any other failure as uv tells it.
hashed_install() {
    local log
    log=$(mktemp)
    if "$@" 2>"$log"; then rm -f "$log"; return 0; fi
    if ! disk_said "$log" && ! hash_failure "${locks[*]}" <"$log" >&2; then cat "$log" >&2; fi
    rm -f "$log"
    return 1
}
# snakeddp itself, editable (its .pth puts src/ on the path). `uv pip install -e .` builds it through setuptools
# every time (uv reinstalls a named source tree), 1.8-2.7 s of CPU, and the sync removes it (it is in no lock): so
# the files it installed are kept in the venv beside a stamp of what they were made from, and put back while
# that is unchanged. Made from: pyproject.toml and the files it names, the version (src/snakeddp/__init__.py),
# src/'s top-level packages, this checkout's path (direct_url.json) and the venv (bin/snakeddp's python).
editable_stamp="$VENV/.snakeddp-editable"
editable_kept="$VENV/.snakeddp-editable.tar"
editable_inputs() {
    { cat pyproject.toml README.md LICENSE src/snakeddp/__init__.py "$VENV/pyvenv.cfg"; ls src; echo "$PWD/$VENV"; } \
        | sha256sum | cut -d' ' -f1
}
# The RECORD of the installed snakeddp whose direct_url.json names this checkout as an editable source.
editable_record() {
    local info
    for info in "$VENV"/lib/python3*/site-packages/snakeddp-*.dist-info; do
        if grep -qF "{\"url\":\"file://$PWD\",\"dir_info\":{\"editable\":true}}" "$info/direct_url.json" 2>/dev/null; then
            echo "$info/RECORD"
            return 0
        fi
    done
    return 1
}
# Every file that RECORD lists, as a path inside the venv (RECORD's are relative to site-packages: ../../../bin).
editable_files() {
    local record=$1 file
    while IFS=, read -r file _; do realpath -m --relative-to="$VENV" "${record%/*/RECORD}/$file"; done <"$record"
}
editable_unchanged() { [[ -f $editable_stamp && "$(cat "$editable_stamp")" == "$(editable_inputs)" ]]; }
# Installed whole, from the inputs as they are now.
editable_current() {
    local record files file
    editable_unchanged && record=$(editable_record) || return 1
    mapfile -t files < <(editable_files "$record")
    for file in "${files[@]}"; do [[ -e "$VENV/$file" ]] || return 1; done
}
editable_install() {
    local record files
    editable_current && return 0
    # Put back only where no snakeddp is installed: one that is (another checkout's, a wheel) is replaced, as uv
    # replaces it.
    if [[ -f $editable_kept ]] && editable_unchanged \
        && ! compgen -G "$VENV/lib/python3*/site-packages/snakeddp-*.dist-info" >/dev/null; then
        tar -C "$VENV" -xf "$editable_kept"
        editable_current && return 0
    fi
    rm -f "$editable_stamp" "$editable_kept"
    hashed_install cached_first "$uv" pip install --quiet "${into[@]}" --no-deps -e .
    # A uv that records the source otherwise finds nothing to keep: it builds again next time, as before.
    record=$(editable_record) || return 0
    mapfile -t files < <(editable_files "$record")
    # POSIX (pax) headers keep each file's modification time to the nanosecond, as uv wrote it.
    tar -C "$VENV" --format=posix -cf "$editable_kept" "${files[@]}"
    editable_inputs >"$editable_stamp"
}
# Bytecode at install time: uv leaves compiling to the first import, and where
# PYTHONDONTWRITEBYTECODE=1 is set (CI machines, containers; this project's VMs) the .pyc files
# are never written, so every process compiled torch, Lightning and Snakemake from source again:
# `import lightning.pytorch` took 10 s instead of 5.5 s here. Compiled once the installs are done, for the
# distributions they changed (snakeddp.environment.bytecode; all of site-packages in a new venv): uv's
# --compile-bytecode looked at all of site-packages again after each install (0.5 s of CPU, twice a set-up).
compiled="$VENV/.snakeddp-compiled"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup: creating $VENV"
    hashed_install new_venv "$PYTHON" "$VENV"
fi
if [[ $installed == 0 ]]; then
    echo "setup: installing ${locks[*]} into $VENV"
    # The locks are complete (every transitive dependency, exact versions, every file's sha256), so no resolver
    # runs: sync installs exactly what the locks say, each file checked against its hash before anything is
    # installed, and removes what they do not.
    # uv reports its downloads and what it installed; the bytecode is compiled below.
    # An install a full disk cut short can leave a package's .dist-info without the RECORD uv writes last (or
    # without its METADATA): uv takes the package for installed and `uv pip check` calls it broken. Without
    # its .dist-info the sync installs it again (over whatever half of its files were written).
    for info in "$VENV"/lib/python3*/site-packages/*.dist-info; do
        [[ ! -d $info || ( -f $info/RECORD && -f $info/METADATA ) ]] || rm -rf "$info"
    done
    again=()
    if PYTHONPATH=src "$VENV/bin/python" -c 'import packaging' 2>/dev/null; then
        for name in $(PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock changed --record "$verified" "${locks[@]}"); do
            again+=(--reinstall-package "$name")
        done
    fi
    hashed_requirements --python "$VENV/bin/python" "${locks[@]}" > "$VENV/.snakeddp-requirements"
    progress "installing the locked packages" hashed_install cached_first "$uv" pip sync --require-hashes "${into[@]}" \
        "${again[@]}" "$VENV/.snakeddp-requirements"
fi
# torch is locked by version; the build is environment.cuda's. PyPI's own (13.0) is the machine's
# choice where pip finds torch (this machine's wheel cache has the CPU build); a CUDA build needs its
# runtime wheels (nvidia-*), which this adds; for a CPU build every requirement is already met and
# nothing changes. Another build comes from PyTorch's index (torch==2.13.0+cu126), the same version.
build=$(torch_build) || exit 2
read -r cuda pin index build_lock <<<"$build"
want=$(stamp_of "$cuda" "$pin" "$index")
# The build's runtime wheels, each with its hash, from the build's own lock (constraints: only what torch needs here).
if [[ $index == "-" ]]; then
    progress "installing torch's build" hashed_install cached_first "$uv" pip install --quiet --require-hashes "${into[@]}" \
        "$pin" --constraint "$core" --constraint "$build_lock"
else
    failed=$(mktemp)
    if ! progress "installing torch's CUDA $cuda build from $index" "$uv" pip install --quiet --require-hashes "${into[@]}" \
        "$pin" --extra-index-url "$index" --constraint "$core" --constraint "$build_lock" 2>"$failed"; then
        # uv's error is a chain of causes; the last one says what went wrong (a name that does not resolve).
        cause=$(grep -v '^\s*$' "$failed" | tail -n 1 | sed -e 's/^ *cause: //' -e 's/^error: //')
        rm -f "$failed"
        echo "setup: could not install $pin (environment.cuda \"$cuda\") from $index: $cause. HINT: let this" \
            "machine reach $index (HTTPS_PROXY for a proxy), or keep environment.cuda \"13.0\" (PyPI's build);" \
            "$VENV keeps the torch it had." >&2
        exit 1
    fi
    rm -f "$failed"
fi
editable_install
# Then snakeddp's own modules (an editable install: compiled in src/, where the imports find them).
# A distribution compiled for an earlier venv (another checkout, a worktree) is linked from the store beside uv.
progress "compiling the installed packages" env PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.bytecode \
    --record "$compiled" --store "$(dirname "$uv_home")/bytecode" --sources src
# Left by the venv's seed (wheel) or a lock older than the venv: the venv is exactly the locks.
extra=$(PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock extra "$core" "$dev")
if [[ -n "$extra" ]]; then
    # The seed's own (a new venv's wheel) go without a word: only what someone installed by hand is news.
    said=$(printf '%s\n' $extra | grep -vxE 'wheel|setuptools|pip' | xargs echo || true)
    [[ -z "$said" ]] || echo "setup: removing packages that no lock names: $said"
    "$uv" pip uninstall --quiet "${into[@]}" $extra
fi
# Said only where they do not fit together ("Checked N packages", "All installed packages are compatible" is no news).
if ! checked=$("$uv" pip check "${into[@]}" 2>&1); then
    printf '%s\n' "$checked" >&2
    exit 1
fi
PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.lock verify "${locks[@]}" "${optional[@]}"
# Installed is not working: import what the stages import (2-4 s of CPU); the stamp is written only
# when they do, so the next set-up checks again.
rm -f "$stamp"
# What decides whether they import: every distribution as installed (its RECORD lists each file's hash), the venv's
# Python, the packages added with a `# stages:` line, the modules config/config.yaml names, snakeddp's own sources.
# Where none changed since the imports last worked (a package removed by hand and put back, a lock written again at
# the same versions, a torch build's lock moved), they are not imported again.
import_inputs() {
    { stat -L -c '%n %s %Y' "$VENV/bin/python"; cat "$VENV/pyvenv.cfg" "$VENV"/lib/python3*/site-packages/*.dist-info/RECORD \
        envs/requirements.in config/config.yaml 2>/dev/null || true; find src -name '*.py' -print0 | sort -z | xargs -0 cat; } \
        | sha256sum | cut -d' ' -f1
}
imported="$VENV/.snakeddp-imported"
inputs=$(import_inputs)
if [[ -f $imported && "$(cat "$imported")" == "$inputs" ]]; then
    echo "setup: imports work (nothing they import has changed since they last did)"
else
    rm -f "$imported"
    progress "importing what the stages import" env PYTHONPATH=src "$VENV/bin/python" -m snakeddp.environment.imports
    echo "$inputs" > "$imported"
fi
if [[ "${#locks[@]}" == 2 && $want_v1 == 0 ]]; then touch "$dev_marker"; fi
cat "${locks[@]}" > "$verified"
echo "$want" > "$stamp"
echo "setup: $VENV matches ${locks[*]}"
