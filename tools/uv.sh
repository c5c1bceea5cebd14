# Sourced by tools/setup.sh, tools/lock.sh and tools/add.sh: sets $uv to the pinned uv, installing it
# once per machine from PyPI into a directory of its own (needs tools/progress.sh sourced first).
# uv installs the locks in seconds where pip took 116-267 s here, and resolves them in seconds
# where pip took 11 minutes.
UV_VERSION=0.13.8
uv_home=${SNAKEDDP_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/snakeddp}/uv-$UV_VERSION
uv="$uv_home/bin/uv"
bootstrap_uv() {
    "${PYTHON:-python3}" -m venv "$uv_home"
    "$uv_home/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
}
if [[ ! -x "$uv" ]]; then
    echo "setup: installing uv $UV_VERSION into $uv_home (once per machine)"
    # Creating its venv (pip included) took 20-30 s here, installing uv a few seconds more.
    progress "installing uv" bootstrap_uv
fi
# uv does not read pip's config: a machine's own wheels (pip's find-links, e.g. a CPU torch) stay usable.
if [[ -z "${UV_FIND_LINKS:-}" && -n "${PIP_FIND_LINKS:-}" ]]; then
    export UV_FIND_LINKS=$PIP_FIND_LINKS
fi
