# Sourced by tools/setup.sh: `progress WHAT COMMAND...` runs COMMAND and, while it runs, prints
# "setup: still WHAT (N s)" every 8 s, so the set-up is never 10 s without a line (2 s spare for a
# busy machine). Compiling site-packages' bytecode printed nothing for 98 s, and bootstrapping uv 21 s:
# it looked stuck.
PROGRESS_EVERY=${PROGRESS_EVERY:-8}

progress() {
    local what=$1
    shift
    local start
    start=$(date +%s)
    (
        # Stopped, it stops its sleep too, which would otherwise hold the output open.
        trap 'kill $! 2>/dev/null; exit 0' TERM
        while true; do
            sleep "$PROGRESS_EVERY" &
            wait $!
            echo "setup: still $what ($(($(date +%s) - start)) s)"
        done
    ) &
    PROGRESS_TICKER=$!
    # Ctrl-C ends the script with COMMAND; the ticker goes with it.
    trap 'kill "$PROGRESS_TICKER" 2>/dev/null || true' EXIT
    local status=0
    "$@" || status=$?
    kill "$PROGRESS_TICKER" 2>/dev/null || true
    wait "$PROGRESS_TICKER" 2>/dev/null || true
    trap - EXIT
    return "$status"
}
