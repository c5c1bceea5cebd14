# Sourced by tools/setup.sh, tools/lock.sh and tools/add.sh: sets $uv to the pinned uv, installing it
# once per machine from PyPI into a directory of its own (needs tools/progress.sh sourced first).
# uv installs the locks in seconds where pip took 116-267 s here, and resolves them in seconds
# where pip took 11 minutes.
UV_VERSION=0.13.8
uv_home=${SNAKEDDP_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/snakeddp}/uv-$UV_VERSION
uv="$uv_home/bin/uv"
bootstrap_uv() {
    "${PYTHON:-python3}" -m venv "$uv_home" && \
        "$uv_home/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
}
if [[ ! -x "$uv" ]]; then
    echo "setup: installing uv $UV_VERSION into $uv_home (once per machine)"
    # Creating its venv (pip included) took 20-30 s here, installing uv a few seconds more.
    uv_log=$(mktemp)
    if ! progress "installing uv" bootstrap_uv 2>"$uv_log"; then
        # A directory it cannot write (a read-only or full home) is one line naming what sets it; anything else
        # (no venv module, no index) is the last line the tools said.
        uv_parent=$uv_home
        until [[ -d $uv_parent ]]; do uv_parent=$(dirname "$uv_parent"); done
        if [[ ! -w $uv_parent ]] || grep -qE 'Read-only file system|Permission denied|No space left' "$uv_log"; then
            why=$(grep -m1 -oE 'Read-only file system|Permission denied|No space left on device' "$uv_log" || true)
            echo "setup: could not install uv into $uv_home (${why:-$uv_parent is not writable}). HINT: set" \
                "SNAKEDDP_TOOLS to a directory you can write (SNAKEDDP_TOOLS=/var/tmp/snakeddp-tools; XDG_CACHE_HOME" \
                "moves it too) and run the same command again" >&2
        else
            echo "setup: could not install uv into $uv_home: $(grep -v '^\s*$' "$uv_log" | tail -n 1). HINT: fix what" \
                "that says (Debian: sudo apt install python3-venv), then run the same command again" >&2
        fi
        rm -f "$uv_log"
        exit 1
    fi
    rm -f "$uv_log"
fi
# uv does not read pip's config: a machine's own wheels (pip's find-links, e.g. a CPU torch) stay usable.
if [[ -z "${UV_FIND_LINKS:-}" && -n "${PIP_FIND_LINKS:-}" ]]; then
    export UV_FIND_LINKS=$PIP_FIND_LINKS
fi
# tools/pypi.toml (PyPI's files cached as PyPI's own headers say, which a proxy may strip) where the user's uv reads
# no configuration of its own (a mirror in their uv.toml stays theirs): user, system, or a project's above this one.
uv_configured() {
    local dir system=${XDG_CONFIG_DIRS:-}
    [[ -n ${UV_CONFIG_FILE:-}${UV_NO_CONFIG:-} ]] && return 0
    for dir in "${XDG_CONFIG_HOME:-$HOME/.config}" ${system//:/ } /etc/xdg /etc; do
        [[ -f $dir/uv/uv.toml ]] && return 0
    done
    dir=$PWD
    while [[ -n $dir ]]; do
        [[ -f $dir/uv.toml ]] || grep -qs '^\[tool\.uv' "$dir/pyproject.toml" && return 0
        dir=${dir%/*}
    done
    return 1
}
pypi_config=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pypi.toml
if [[ -f $pypi_config ]] && ! uv_configured; then export UV_CONFIG_FILE=$pypi_config; fi
# uv hashes no find-links file (0.13.8: "Hash-checking is enabled, but no hashes were provided or computed for:
# torch==2.13.0+cpu"), so a locked package whose wheel a find-links folder holds, with a sha256 the locks
# list (this machine's CPU torch), is installed from that file by its URL, the hash still checked.
# `hashed_requirements [--python PY] LOCK...` prints the locks so, as one requirements file; with --python, only
# the wheels that Python installs (this machine's torch wheel is cp311's: a 3.12 takes PyPI's, by the same hashes).
hashed_requirements() {
    local dir wheel digest name tag="" tags
    local -A by_url=()
    local IFS_=${UV_FIND_LINKS:-}
    if [[ ${1:-} == --python ]]; then
        tag=$("$2" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
        shift 2
    fi
    for dir in ${IFS_//,/ }; do
        dir=${dir#file://}
        for wheel in "$dir"/*.whl; do
            [[ -f $wheel ]] || continue
            # name-version[-build]-PYTHON-ABI-PLATFORM.whl: PYTHON is a dotted set (py3, cp311, py2.py3).
            tags=$(basename "$wheel" .whl | awk -F- '{ print "." $(NF - 2) "." }')
            [[ -z $tag || $tags == *".$tag."* || $tags == *".py3."* ]] || continue
            digest=$(wheel_digest "$wheel")
            grep -q "sha256:$digest" "$@" || continue
            name=$(basename "$wheel")
            name=${name%%-*}
            by_url[${name,,}]="$name @ file://$wheel --hash=sha256:$digest"
        done
    done
    awk -v skip=" ${!by_url[*]} " '
        /^[A-Za-z0-9]/ { name = tolower($0); sub(/==.*/, "", name); gsub(/[-.]/, "_", name); dropped = index(skip, " " name " ") > 0 }
        !dropped' "$@"
    ((${#by_url[@]} == 0)) || printf '%s\n' "${by_url[@]}"
}
# Online, uv asks the index about every page it reads (this machine's index sends no cache headers, so it reads each
# again): a sync of the locks that downloads nothing took 0.6 s of CPU so, 0.07 s offline. A lock names every file
# by its hash, so the files uv's cache holds are the ones it would install: `cached_first UV_COMMAND...` runs it
# offline, and again online where that fails (a file the cache lacks; any other failure is then uv's, online). Not
# where the disk said no (full, read-only): online fails the same way, after reading every page of the index again.
cached_first() {
    local log status=0
    log=$(mktemp)
    "$@" --offline 2>"$log" || status=$?
    if ((status == 0)) || grep -qE 'os error (28|30)|No space left on device|Read-only file system' "$log"; then
        cat "$log" >&2
        rm -f "$log"
        return "$status"
    fi
    rm -f "$log"
    "$@"
}
# `new_venv PYTHON DIR`: a venv seeded with pip, setuptools and wheel, from uv's cache where it holds them. On a fresh
# machine (an empty cache) the offline try creates DIR, then fails on the seed packages, and uv (0.9 and later)
# refuses to create a venv where one exists: --clear, so the online try starts over.
new_venv() {
    cached_first "$uv" venv --quiet --seed --clear --python "$1" "$2"
}
# A find-links wheel's sha256, kept beside uv by its path, size and modification time: torch's CPU wheel is 190 MB,
# 1.2 s of CPU to hash, and every set-up, lock and test checkout hashed it again. A kept digest only picks the
# file's URL: uv still checks the file against the lock's hash as it installs it.
wheel_digest() {
    local wheel=$1 kept="$uv_home/find-links.sha256" key digest
    key="$(stat -c '%s %.9Y' "$wheel") $wheel"
    digest=$(awk -v key="$key" 'substr($0, 66) == key { print substr($0, 1, 64); exit }' "$kept" 2>/dev/null)
    if [[ -z $digest ]]; then
        digest=$(sha256sum "$wheel" | cut -d' ' -f1)
        echo "$digest $key" >> "$kept" 2>/dev/null || true
    fi
    echo "$digest"
}
