#!/usr/bin/env bash
# Make `snakemake --profile NAME` work from the checkout's root for every platform's profile: each
# profiles/NAME whose config names its platform, NAME (tools/setup.sh runs this). Snakemake looks a
# bare profile name up in the working directory, then in
# ${XDG_CONFIG_HOME:-~/.config}/snakemake, then /etc/xdg/snakemake. Links there, rather than at
# the checkout's top level, keep the repository's layout and never shadow a profile the user
# already has: a name that is taken is left alone, with a note on how to reach ours; a link left by a
# checkout that is gone is replaced. What it says is one line a kind (linked, another checkout's, the user's own).
#   tools/profiles.sh          # link what is free; one line for what it linked, one for each kind it kept
#   tools/profiles.sh --quiet  # the same, silent about the names it keeps (a set-up with nothing else to do)
#   tools/profiles.sh --here   # the bare names mean this checkout's, where another checkout's links took them
# Linking is a convenience: a config directory it cannot write is said in one line, and the set-up goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=0
here=0
case ${1:-} in
    "") ;;
    --quiet) quiet=1 ;;
    --here) here=1 ;;
    *) echo "setup: unknown option $1. HINT: tools/profiles.sh [--quiet | --here]" >&2; exit 2 ;;
esac
dir=${XDG_CONFIG_HOME:-$HOME/.config}/snakemake
# "a, b and c" for the words given.
listed() { local IFS=,; echo "$*" | sed 's/,/, /g; s/, \([^,]*\)$/ and \1/'; }
# The one line for a directory it cannot write (a read-only file system, another user's): snakemake's own error
# (after "setup: ") only in brackets.
unwritable() {
    echo "setup: could not link the profiles into $dir (${1##*: }), so bare names such as --profile local" \
        "do not reach this checkout's; the set-up goes on. HINT: type --profile profiles/local (the path, from the" \
        "checkout's root), or set XDG_CONFIG_HOME to a directory you can write and run tools/setup.sh again" >&2
    exit 0
}
said=$(mkdir -p "$dir" 2>&1) || unwritable "$said"
linked=()
relinked=()
was_roots=()
others=()
other_roots=()
yours=()
for config in profiles/*/config.yaml; do
    name=$(basename "$(dirname "$config")")
    grep -q -- "- platform=$name\$" "$config" || continue  # not a platform's profile (profiles/default)
    ours=$PWD/profiles/$name
    link=$dir/$name
    if [[ -L "$link" && "$(readlink "$link")" == "$ours" ]]; then
        continue
    elif [[ -L "$link" && ! -e "$link" ]] || [[ $here == 1 && -L "$link" && -f "$(readlink -f "$link")/../../Snakefile" ]]; then
        # A link into a checkout that was since moved or removed reaches nothing: nothing of the user's is lost.
        # With --here, another checkout's link is the user's ask.
        was=$(readlink "$link")
        [[ -e "$link" ]] || was="$was (gone)"
        said=$(ln -sfn "$ours" "$link" 2>&1) || unwritable "$said"
        relinked+=("$name")
        was_roots+=("${was/\/profiles\/$name/\/profiles\/NAME}")
    elif [[ -L "$link" && -f "$(readlink -f "$link")/../../Snakefile" ]]; then
        # Another checkout's (a second clone, a worktree): bare names keep meaning that one until the user says.
        others+=("$name")
        root=$(dirname "$(dirname "$(readlink -f "$link")")")
        [[ " ${other_roots[*]} " == *" $root "* ]] || other_roots+=("$root")
    elif [[ -e "$link" || -L "$link" ]]; then
        yours+=("$name")
    else
        said=$(ln -s "$ours" "$link" 2>&1) || unwritable "$said"
        linked+=("$name")
    fi
done
all=("${linked[@]}" "${relinked[@]}")
if ((${#all[@]})); then
    gone=""
    # Where the names it replaced pointed: one place for all of them, as a checkout's links are.
    if ((${#relinked[@]})); then
        mapfile -t was_roots < <(printf '%s\n' "${was_roots[@]}" | sort -u)
        gone="; $(listed "${relinked[@]}") pointed to $(listed "${was_roots[@]}")"
    fi
    if ((${#all[@]} == 1)); then
        echo "setup: --profile ${all[0]} now means $PWD/profiles/${all[0]} (linked from $dir/${all[0]}$gone)"
    else
        echo "setup: --profile $(listed "${all[@]}") now mean $PWD/profiles/NAME (linked from $dir$gone)"
    fi
fi
((quiet == 0)) || exit 0
# An example name for the HINTs: local where it is one of them.
example() { local name; for name; do [[ $name != local ]] || { echo local; return; }; done; echo "$1"; }
if ((${#others[@]})); then
    echo "setup: --profile $(listed "${others[@]}") mean$( ((${#others[@]} > 1)) || echo s) another checkout's" \
        "($(listed "${other_roots[@]}")), kept. HINT: type --profile profiles/$(example "${others[@]}") for this" \
        "checkout's, or run tools/profiles.sh --here to make the bare names mean this checkout's"
fi
if ((${#yours[@]})); then
    where=$dir/NAME
    ((${#yours[@]} > 1)) || where=$dir/${yours[0]}
    echo "setup: --profile $(listed "${yours[@]}") finds $where (yours, kept), not this checkout's. HINT: type" \
        "--profile profiles/$(example "${yours[@]}") for this checkout's (or move yours away and rerun tools/setup.sh)."
fi
