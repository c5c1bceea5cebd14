#!/usr/bin/env bash
# The first thing to run on a lent GPU machine (issue 51), under 8 minutes on one H100/H200, with the machine's
# own torch and snakeddp's other packages carried as wheels. In this order:
#   1. the default workflow through `snakemake --profile local`, from a copy of the checkout (on one GPU:
#      devices-1 trains on it, devices-2 on the CPU, and the report's runs table says so)
#   2. pytest -m gpu (tests/gpu: precision x strategy, preemption and resume, determinism, the driver's files)
#   3. python -m bench gpu: samples/s and time to the first step against hand-written DDP on the same GPU,
#      32-true and bf16-mixed, written to bench/results.md and bench/results.json
#
#   tools/gpu-check.sh --prepare          here (PyPI reachable): the wheels the GPU image lacks, into
#                                         .gpu-check/wheels (about 30 MB; carry .gpu-check)
#   tools/gpu-check.sh --venv             the set-up alone: .gpu-check/venv over python3 (itself a venv or not)
#   tools/gpu-check.sh OUT                on the GPU machine (make gpu-check OUT=...): set up, run the three
#                                         steps, copy the logs and bench/results.* to OUT
#   tools/gpu-check.sh --standin OUT      here: the same steps on a stand-in A100 (tests/gpu_standin.py), which
#                                         stop at its first CUDA call (step 1's devices-1 run)
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK=.gpu-check
# What the GPU image holds already (KINDS.md of the lending machines): never carried, so its own torch, CUDA
# libraries and compiled packages stay the ones it was built with.
IMAGE_HAS='^(torch|triton|nvidia-.*|numpy|pandas|pyarrow|matplotlib|scipy|pillow|lightning|pytorch-lightning|torchmetrics|lightning-utilities|safetensors|jinja2|markupsafe|psutil|pyyaml|fonttools|kiwisolver|contourpy|cycler|pyparsing|python-dateutil|six|packaging|fsspec|aiohttp|aiosignal|frozenlist|multidict|yarl|propcache|attrs|filelock|networkx|sympy|mpmath|typing-extensions|pytest|pluggy|iniconfig|execnet|pytest-xdist|pytest-timeout|requests|urllib3|idna|certifi|charset-normalizer|pygments|tabulate|wrapt|setuptools|pip|wheel|aiohappyeyeballs|nvidia-ml-py)$'

say() { echo "gpu-check: $*" >&2; }

if [[ "${1:-}" == "--prepare" ]]; then
    mkdir -p "$CHECK/wheels"
    names=$(cat envs/requirements.lock <(grep -E '^(pytest|pytest-xdist|pytest-timeout|execnet|iniconfig|pluggy)==' envs/requirements-dev.lock) \
        | grep -E '^[A-Za-z0-9]' | cut -d' ' -f1 | sed 's/;.*//' | sort -u)
    for pin in $names; do
        name=$(echo "${pin%%==*}" | tr 'A-Z_.' 'a-z--')
        [[ "$name" =~ $IMAGE_HAS ]] && continue
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$CHECK/wheels" "$pin" || say "no wheel of $pin for the GPU image's Python 3.12 (left out)"
    done
    say "$(ls "$CHECK/wheels" | wc -l) wheels, $(du -sh "$CHECK/wheels" | cut -f1), in $CHECK/wheels: carry $CHECK"
    exit 0
fi

if [[ "${1:-}" == "--standin" ]]; then
    shift
    export SNAKEDDP_GPU_CHECK_PYTHON=.venv/bin/python
    exec .venv/bin/python -m tests.gpu_standin -- bash tools/gpu-check.sh "$@"
fi

# The machine's Python with its torch, and the carried wheels of what it lacks, in a venv over it.
make_venv() {
    python3 -m venv --system-site-packages "$CHECK/venv"
    local venv_python=$CHECK/venv/bin/python
    # --system-site-packages reaches the base interpreter's packages only: where python3 is itself a venv (the
    # GPU image's is /opt/torch/.venv, torch in it) a .pth adds that venv's, after the carried wheels' place.
    python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
        >"$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_parent_site.pth"
    local have wheel name wheels=()
    have=$("$venv_python" -m pip list --format=freeze 2>/dev/null | cut -d= -f1 | tr 'A-Z_.' 'a-z--')
    for wheel in "$CHECK"/wheels/*.whl; do
        [[ -e "$wheel" ]] || continue
        name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
        grep -qx "$name" <<<"$have" || wheels+=("$wheel")
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

say "1/3 the default workflow: snakemake --profile local, in a copy of the checkout"
flow=$(mktemp -d)
tar --exclude=./.venv --exclude=./.venv-azureml-v1 --exclude="./$CHECK" --exclude=./results --exclude=./logs \
    --exclude=./.snakemake --exclude=./.git -cf - . | tar -xf - -C "$flow"
status=0
# The bare name as users type it, linked by the set-up's own step, in a config folder of the copy's own.
(cd "$flow" && export XDG_CONFIG_HOME=$flow/.config && tools/profiles.sh && "$bin/snakemake" --profile local) \
    >"$OUT/workflow.log" 2>&1 || status=$?
tail -n 25 "$OUT/workflow.log" >&2
cp -r "$flow/logs" "$OUT/workflow-logs" 2>/dev/null || true
if [[ $status -ne 0 ]]; then
    say "step 1 stopped (exit $status) after $((SECONDS - started)) s: $OUT/workflow.log, $OUT/workflow-logs"
    exit "$status"
fi
"$python" - "$flow" <<'PY' | tee "$OUT/runs.txt" >&2
import json, sys
from pathlib import Path
for record in sorted(Path(sys.argv[1], "results/runs").glob("*/provenance.json")):
    launch = json.loads(record.read_text())["launch"]
    print(record.parent.name, launch["accelerator"], launch["backend"], launch["variables"].get("CUDA_VISIBLE_DEVICES", ""))
PY

say "2/3 pytest -m gpu"
"$python" -m pytest -p no:cacheprovider -m gpu tests/gpu -q -n 4 --durations=10 >"$OUT/pytest-gpu.log" 2>&1 || status=$?
tail -n 15 "$OUT/pytest-gpu.log" >&2

say "3/3 python -m bench gpu"
"$python" -m bench gpu >"$OUT/bench-gpu.log" 2>&1 || status=$?
tail -n 15 "$OUT/bench-gpu.log" >&2
cp bench/results.md bench/results.json "$OUT/" 2>/dev/null || true
say "done in $((SECONDS - started)) s (exit $status): $OUT"
exit "$status"
