# Sourced by tools/setup.sh, tools/lock.sh and tools/add.sh (after tools/progress.sh): sets $PYTHON to an
# interpreter snakeddp's locks install on (each lock is checked for all of them by tools/lock.sh). PYTHON as given,
# else the first of python3.11, python3.12, python3.13 and python3 that is one of them (Debian 12's, Ubuntu 24.04's,
# Debian 13's python3), else one uv finds or fetches (a managed CPython, where GitHub answers). None: one line
# naming the versions and the command that gets one, exit 2, before anything is created or installed.
SUPPORTED_PYTHONS=(3.11 3.12 3.13)
# "3.12 /usr/bin/python3.12" for an interpreter that starts, nothing for one that does not (pyenv's shim of a
# version it does not select exits 127).
python_version_of() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2], sys.executable)' 2>/dev/null || true
}
python_supported() {
    local version
    for version in "${SUPPORTED_PYTHONS[@]}"; do [[ $1 == "$version" ]] && return 0; done
    return 1
}
pick_python() {
    local candidate found version path wanted seen=()
    wanted="Python $(IFS=/; echo "${SUPPORTED_PYTHONS[*]}" | sed 's#/#, #g; s#, \([^,]*\)$# or \1#')"
    if [[ -n ${PYTHON:-} ]]; then
        read -r version path <<<"$(python_version_of "$PYTHON")"
        if [[ -n ${version:-} ]] && python_supported "$version"; then PYTHON=$path; return 0; fi
        echo "setup: PYTHON=$PYTHON is ${version:+Python $version}${version:-no Python that starts}, and snakeddp's" \
            "locks are for $wanted. HINT: unset PYTHON, or set it to one of those (e.g. PYTHON=python3.12)" >&2
        exit 2
    fi
    for candidate in python3.11 python3.12 python3.13 python3; do
        command -v "$candidate" >/dev/null || continue
        read -r version path <<<"$(python_version_of "$candidate")"
        [[ -n ${version:-} ]] || continue
        if python_supported "$version"; then PYTHON=$path; return 0; fi
        seen+=("$candidate is $version")
    done
    # uv (bootstrapped by any python3) finds a managed CPython it installed before, or installs one.
    if command -v python3 >/dev/null; then
        source tools/uv.sh
        for version in "${SUPPORTED_PYTHONS[@]}"; do
            found=$("$uv" python find --system --no-python-downloads "$version" 2>/dev/null) && { PYTHON=$found; return 0; }
        done
        if "$uv" python install --quiet "${SUPPORTED_PYTHONS[-1]}" 2>/dev/null \
            && found=$("$uv" python find --system --no-python-downloads "${SUPPORTED_PYTHONS[-1]}" 2>/dev/null); then
            PYTHON=$found
            return 0
        fi
        seen+=("uv could not fetch one")
    fi
    local said
    ((${#seen[@]})) || seen=("no python3 on PATH")
    said=$(printf '; %s' "${seen[@]}")
    echo "setup: snakeddp needs $wanted, and this machine has none (${said:2}). HINT: install one" \
        "(Debian 12: sudo apt install python3.11 python3.11-venv; Ubuntu 24.04: python3.12 python3.12-venv), or" \
        "name one: PYTHON=/path/to/python3.12 make run" >&2
    exit 2
}
pick_python
