#!/usr/bin/env bash
# The first thing to run on a lent GPU machine (issue 51; issue 72 item 9: 300 s or less on one H200, so a
# second try fits the lease), with the machine's own torch and snakeddp's other packages carried as wheels:
#   0. the machine's python3 against the Python the wheels were prepared for (a mismatch stops it, in one line)
#   1. the default workflow through `snakemake --profile local`, from a copy of the checkout (on one GPU:
#      devices-1 trains on it, devices-2 on the CPU; on two or more, devices-2 is a 2-rank NCCL run, and a
#      second invocation trains two devices-1 runs at once, each on a GPU of its own)
#   2. pytest -m gpu (tests/gpu: precision x strategy, preemption and resume, determinism, the driver's files;
#      and every other file with gpu tests: the device loader, the pool's NVML use, the strategies),
#      on one GPU beside the rest of step 1 once devices-1 has trained (neither is timed)
#   3. python -m bench gpu, alone: bench 15's ratios against hand-written DDP at both partition sizes, 32-true
#      and bf16-mixed, one round (steps 1-2 warmed the caches), written to bench/results.md and .json
# Each step has a time limit (STEP_S), and the bench the rest of TOTAL_S (at least BENCH_S).
#
#   tools/gpu-check.sh --prepare [--python X.Y]   here (PyPI reachable): the wheels the GPU image lacks, or has
#                                         at another version than the lock's (Lightning, torchmetrics), into
#                                         .gpu-check/wheels, for the image's Python (default 3.12; carry .gpu-check)
#   tools/gpu-check.sh --venv             the set-up alone: .gpu-check/venv over python3 (itself a venv or not)
#   tools/gpu-check.sh OUT                on the GPU machine (make gpu-check OUT=...): set up, run the three
#                                         steps, copy the logs and bench/results.* to OUT
#   tools/gpu-check.sh --standin OUT      here: the same steps on a stand-in A100 (tests/gpu_standin.py), which
#                                         stop at its first CUDA call (step 1's devices-1 run)
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK=.gpu-check
# The Python the carried wheels are for, written by --prepare beside them.
PYTHON_MARK=$CHECK/wheels/PYTHON
# What the GPU image holds already (KINDS.md of the lending machines): never carried, so its own torch, CUDA
# libraries and compiled packages stay the ones it was built with. Not Lightning, torchmetrics and
# lightning-utilities: snakeddp runs only the Lightning its compat table was written for (2.6.0-2.6.6), so the
# lock's are carried, and installed where the image's differ.
IMAGE_HAS='^(torch|triton|nvidia-.*|numpy|pandas|pyarrow|matplotlib|scipy|pillow|safetensors|jinja2|markupsafe|psutil|pyyaml|fonttools|kiwisolver|contourpy|cycler|pyparsing|python-dateutil|six|packaging|fsspec|aiohttp|aiosignal|frozenlist|multidict|yarl|propcache|attrs|filelock|networkx|sympy|mpmath|typing-extensions|pytest|pluggy|iniconfig|execnet|pytest-xdist|pytest-timeout|requests|urllib3|idna|certifi|charset-normalizer|pygments|tabulate|wrapt|setuptools|pip|wheel|aiohappyeyeballs|nvidia-ml-py)$'

say() { echo "gpu-check: $*" >&2; }

if [[ "${1:-}" == "--prepare" ]]; then
    target=3.12
    [[ "${2:-}" == "--python" && -n "${3:-}" ]] && target=$3
    rm -rf "$CHECK/wheels"
    mkdir -p "$CHECK/wheels"
    names=$(cat envs/requirements.lock <(grep -E '^(pytest|pytest-xdist|pytest-timeout|execnet|iniconfig|pluggy)==' envs/requirements-dev.lock) \
        | grep -E '^[A-Za-z0-9]' | cut -d' ' -f1 | sed 's/;.*//' | sort -u)
    for pin in $names; do
        name=$(echo "${pin%%==*}" | tr 'A-Z_.' 'a-z--')
        [[ "$name" =~ $IMAGE_HAS ]] && continue
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$target" --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$CHECK/wheels" "$pin" || say "no wheel of $pin for the GPU image's Python $target (left out)"
    done
    echo "$target" >"$PYTHON_MARK"
    say "$(ls "$CHECK"/wheels/*.whl | wc -l) wheels for Python $target, $(du -sh "$CHECK/wheels" | cut -f1), in $CHECK/wheels: carry $CHECK"
    exit 0
fi

if [[ "${1:-}" == "--standin" ]]; then
    shift
    export SNAKEDDP_GPU_CHECK_PYTHON=.venv/bin/python
    exec .venv/bin/python -m tests.gpu_standin -- bash tools/gpu-check.sh "$@"
fi

# The carried wheels hold compiled packages for one Python: on another they would not import, several steps in.
check_python() {
    local have want
    compgen -G "$CHECK/wheels/*.whl" >/dev/null || return 0  # nothing carried: the image has it all
    have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    want=$(cat "$PYTHON_MARK" 2>/dev/null || echo "3.12")
    if [[ "$have" != "$want" ]]; then
        say "the carried wheels are for Python $want, and this machine's python3 is $have: nothing was run." \
            "HINT: where PyPI answers, run tools/gpu-check.sh --prepare --python $have, and carry $CHECK again."
        exit 2
    fi
}

# The machine's Python with its torch, and the carried wheels of what it lacks (or has at another version),
# in a venv over it.
make_venv() {
    check_python
    python3 -m venv --system-site-packages "$CHECK/venv"
    local venv_python=$CHECK/venv/bin/python
    # --system-site-packages reaches the base interpreter's packages only: where python3 is itself a venv (the
    # GPU image's is /opt/torch/.venv, torch in it) a .pth adds that venv's, after the carried wheels' place.
    python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
        >"$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_parent_site.pth"
    local have wheel name version wheels=()
    have=$("$venv_python" -m pip list --format=freeze 2>/dev/null \
        | awk -F'==' 'NF == 2 { name = tolower($1); gsub(/[_.]/, "-", name); print name "==" $2 }')
    for wheel in "$CHECK"/wheels/*.whl; do
        [[ -e "$wheel" ]] || continue
        name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
        version=$(basename "$wheel" | cut -d- -f2)
        grep -qxF "$name==$version" <<<"$have" || wheels+=("$wheel")
    done
    [[ ${#wheels[@]} -eq 0 ]] || "$venv_python" -m pip install -q --no-index --no-deps --no-compile "${wheels[@]}"
    "$venv_python" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true
}

if [[ "${1:-}" == "--venv" ]]; then  # the set-up alone (tests/test_gpu_check.py)
    make_venv
    exit 0
fi

OUT=${1:-$CHECK/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
started=$SECONDS
if [[ -n "${SNAKEDDP_GPU_CHECK_PYTHON:-}" ]]; then
    python=$SNAKEDDP_GPU_CHECK_PYTHON
else
    make_venv
    python=$CHECK/venv/bin/python
fi
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
bin=$(dirname "$python")
export PATH="$bin:$PATH" PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$python" - <<'PY' | tee "$OUT/machine.txt" >&2
import platform, torch
from snakeddp.util import gpus
print("python", platform.python_version(), "torch", torch.__version__, "CUDA build", torch.version.cuda)
print("driver", gpus.driver_version(), "|", gpus.describe({}), "| arch list", " ".join(torch.cuda.get_arch_list()))
PY

# Time limits: the workflow and pytest STEP_S each; the bench gets what is left of TOTAL_S (at least BENCH_S).
STEP_S=${GPU_CHECK_STEP_S:-100}
TOTAL_S=${GPU_CHECK_TOTAL_S:-290}
BENCH_S=${GPU_CHECK_BENCH_S:-150}
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
workers=$(( $(nproc) < 12 ? $(nproc) : 12 ))
pytest_gpu() {
    say "2/3 pytest -m gpu on $workers workers (limit ${STEP_S} s)"
    # Every file with gpu-marked tests: the matrix, the device loader against the host path, the pool's NVML use,
    # the strategies; a file that cannot be collected on this image is an error in the log, not the end of the rest.
    timeout -k 5 "$STEP_S" "$python" -m pytest -p no:cacheprovider -m gpu --continue-on-collection-errors \
        tests/gpu tests/data/test_device.py tests/util/test_gpuuse.py tests/training/test_strategies.py \
        -q -n "$workers" --durations=10 >"$OUT/pytest-gpu.log" 2>&1
}

say "1/3 the default workflow: snakemake --profile local, in a copy of the checkout (limit ${STEP_S} s)"
flow=$(mktemp -d)
tar --exclude=./.venv --exclude=./.venv-azureml-v1 --exclude="./$CHECK" --exclude=./results --exclude=./logs \
    --exclude=./.snakemake --exclude=./.git -cf - . | tar -xf - -C "$flow"
status=0
# The bare name as users type it, linked by the set-up's own step, in a config folder of the copy's own.
(cd "$flow" && export XDG_CONFIG_HOME=$flow/.config && tools/profiles.sh \
    && exec timeout -k 5 "$STEP_S" "$bin/snakemake" --profile local) >"$OUT/workflow.log" 2>&1 &
workflow_pid=$!
# On one GPU, pytest starts once devices-1 has trained there (devices-2 trains on the CPU meanwhile): the
# workflow's GPU pool would find the tests' processes on the GPU and refuse it as busy.
pytest_pid=
if [[ "$gpus" -le 1 ]]; then
    while kill -0 "$workflow_pid" 2>/dev/null && [[ ! -e "$flow/results/runs/devices-1/provenance.json" ]]; do
        sleep 1
    done
    if kill -0 "$workflow_pid" 2>/dev/null; then
        pytest_gpu &
        pytest_pid=$!
    fi
fi
wait "$workflow_pid" || status=$?
tail -n 25 "$OUT/workflow.log" >&2
cp -r "$flow/logs" "$OUT/workflow-logs" 2>/dev/null || true
if [[ $status -ne 0 ]]; then
    [[ -z "$pytest_pid" ]] || kill "$pytest_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    say "step 1 stopped (exit $status) after $((SECONDS - started)) s: $OUT/workflow.log, $OUT/workflow-logs"
    exit "$status"
fi
runs() {  # each run of the copy: its accelerator, backend, GPUs and when it trained
    "$python" - "$flow" <<'PY'
import json, sys
from pathlib import Path
for record in sorted(Path(sys.argv[1], "results/runs").glob("*/provenance.json")):
    run = json.loads(record.read_text())
    launch, timing = run["launch"], run.get("timing", {})
    print(record.parent.name, launch["accelerator"], launch["backend"], launch["processes_per_node"], "rank(s)",
          "GPUs", launch["variables"].get("CUDA_VISIBLE_DEVICES", "") or "-",
          "from", timing.get("started_at", "?"), "to", timing.get("finished_at", "?"))
PY
}
runs | tee "$OUT/runs.txt" >&2
if [[ "$gpus" -ge 2 ]]; then
    say "1/3 on $gpus GPUs: devices-2 above is the 2-rank NCCL run; now two devices-1 runs at once"
    (cd "$flow" && export XDG_CONFIG_HOME=$flow/.config && timeout -k 5 "$STEP_S" "$bin/snakemake" --profile local \
        --until train --config "sweep={launch.devices: [1], seed: [1, 2]}" "launch={accelerator: gpu}") \
        >"$OUT/workflow-two.log" 2>&1 || status=$?
    tail -n 10 "$OUT/workflow-two.log" >&2
    runs | tee "$OUT/runs.txt" >&2
fi
say "step 1 done after $((SECONDS - started)) s"

if [[ -z "$pytest_pid" ]]; then
    pytest_gpu || status=$?
else
    wait "$pytest_pid" || status=$?
fi
tail -n 15 "$OUT/pytest-gpu.log" >&2
say "step 2 done after $((SECONDS - started)) s"

left=$((TOTAL_S - (SECONDS - started)))
left=$((left < BENCH_S ? BENCH_S : left))
say "3/3 python -m bench gpu, alone: one round at both partition sizes (limit ${left} s)"
timeout -k 5 "$left" "$python" -m bench gpu --reps 1 --warmup 0 >"$OUT/bench-gpu.log" 2>&1 || status=$?
tail -n 15 "$OUT/bench-gpu.log" >&2
cp bench/results.md bench/results.json "$OUT/" 2>/dev/null || true
say "done in $((SECONDS - started)) s (exit $status): $OUT"
exit "$status"
