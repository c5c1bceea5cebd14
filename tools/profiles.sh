#!/usr/bin/env bash
# Make `snakemake --profile NAME` work from the checkout's root for every platform's profile: each
# profiles/NAME whose config names its platform, NAME (tools/setup.sh runs this). Snakemake looks a
# bare profile name up in the working directory, then in
# ${XDG_CONFIG_HOME:-~/.config}/snakemake, then /etc/xdg/snakemake. Links there, rather than at
# the checkout's top level, keep the repository's layout and never shadow a profile the user
# already has: a name that is taken is left alone, with a note on how to reach ours; a link left by a
# checkout that is gone is replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${XDG_CONFIG_HOME:-$HOME/.config}/snakemake
mkdir -p "$dir"
for config in profiles/*/config.yaml; do
    name=$(basename "$(dirname "$config")")
    grep -q -- "- platform=$name\$" "$config" || continue  # not a platform's profile (profiles/default)
    ours=$PWD/profiles/$name
    link=$dir/$name
    if [[ -L "$link" && "$(readlink "$link")" == "$ours" ]]; then
        continue
    elif [[ -L "$link" && ! -e "$link" ]]; then
        # A link into a checkout that was since moved or removed reaches nothing: nothing of the user's is lost.
        gone=$(readlink "$link")
        rm "$link" && ln -s "$ours" "$link"
        echo "setup: --profile $name now means $ours (linked from $link, which pointed to $gone, gone)"
    elif [[ -L "$link" && -f "$(readlink -f "$link")/../../Snakefile" ]]; then
        # Another checkout's (a second clone, a worktree): bare names keep meaning that one until the user says.
        echo "setup: --profile $name means $(readlink -f "$link"), another checkout's (kept), not $ours. HINT: type --profile profiles/$name for this checkout's, or run ln -sfn $(printf %q "$ours") $(printf %q "$link") to make the bare name mean it."
    elif [[ -e "$link" || -L "$link" ]]; then
        echo "setup: --profile $name finds $link (yours, kept), not $ours. HINT: type --profile profiles/$name for this checkout's (or move yours away and rerun tools/setup.sh)."
    else
        ln -s "$ours" "$link"
        echo "setup: --profile $name now means $ours (linked from $link)"
    fi
done
