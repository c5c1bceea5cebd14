"""`snakeddp status` typed while a local sweep trains, as a user types it in the checkout's root: every run of
the sweep has a row with its state, and a run that trains shows its step, % complete and ETA; once the sweep is
done every row says done, and every try of every run has its account (issue 75, items 4 and 5)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snakeddp.run import account, status
from tests import workflow_venv
from tests.checkout import Checkout
from tests.helpers import TINY, merged, subprocess_env

pytestmark = pytest.mark.e2e

# Two seeds of one configuration, each long enough (about 10 s of epochs under load) that the command is typed
# while one trains.
SWEEP = merged(TINY, {
    "data": {"num_train_files": 4, "num_records_per_train_file": 8001, "num_features": 16},
    "model": {"hidden_sizes": [32]},
    "trainer": {"max_epochs": 4, "batch_size": 16, "early_stopping": {"enabled": False}},
    "sweep": {"seed": [1, 2]},
})  # fmt: skip
ETA = re.compile(r"^\d+(s|m\d\ds|h\d\dm)$")


def snakeddp_status(checkout: Path) -> list[list[str]]:
    """`snakeddp status` typed in the checkout's root: its table as cells, header first."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "snakeddp"), "status"],
        cwd=checkout, env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # The columns as the header places them: a cell may hold spaces (its detail, "2s ago").
    starts = [lines[0].index(name) for name in status.COLUMNS]
    bounds = [*zip(starts, [*starts[1:], None], strict=True)]
    return [[line[a:b].strip() for a, b in bounds] for line in lines]


def training_row(checkout: Path, deadline: float) -> tuple[list[str], list[list[str]]]:
    """The table once a run trains past its first post with a pace (its ETA known)."""
    while time.monotonic() < deadline:
        saids = (
            [status.read(d) for d in (checkout / "results/runs").glob("*")]
            if (checkout / "results/runs").is_dir()
            else []
        )
        if any(s and s["state"] == "training" and s.get("eta_s") is not None for s in saids):
            table = snakeddp_status(checkout)
            # Mid-way: its last post at the fit's end says training at 100% until the launcher says done.
            rows = [row for row in table[1:] if row[1] == "training" and row[6] != "-" and row[5] != "100.0"]
            if rows:
                return rows[0], table
        time.sleep(0.3)
    raise AssertionError("no run trained with a known ETA in time")


def test_status_typed_during_a_local_sweep_shows_each_runs_state_and_eta(tmp_path):
    checkout = Checkout(tmp_path)
    checkout.write_config(SWEEP)
    log = tmp_path / "run.log"
    with log.open("w") as out:
        typed = subprocess.Popen(
            [workflow_venv.snakemake(), "--profile", "profiles/local"], cwd=tmp_path, env=subprocess_env(),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        row, table = training_row(tmp_path, time.monotonic() + 300)
    finally:
        assert typed.wait(timeout=600) == 0, log.read_text()[-4000:]
    assert table[0] == list(status.COLUMNS)
    assert sorted(r[0] for r in table[1:]) == ["seed-1", "seed-2"], table
    run, state, epoch, step, samples, percent, eta, updated, detail = row
    assert state == "training" and re.fullmatch(r"\d+/4", epoch) and re.fullmatch(r"\d+/\d+", step), row
    assert float(samples.replace(",", "")) > 0 and not re.search(r"\.\d\d$|\d{4}\.", samples), row
    assert 0 < float(percent) < 100 and ETA.match(eta) and updated.endswith("ago") and "rank 0" in detail, row
    others = [r for r in table[1:] if r[0] != run]
    assert all(r[1] in ("not started", "starting", "training", "done") for r in others), table

    after = snakeddp_status(tmp_path)
    assert [(r[0], r[1], r[5], r[6]) for r in after[1:]] == [
        ("seed-1", "done", "100.0", "-"), ("seed-2", "done", "100.0", "-")
    ], after  # fmt: skip
    for name in ("seed-1", "seed-2"):
        tried = json.loads((tmp_path / "results/runs" / name / "tries.json").read_text())["tries"]
        for one in tried:
            kept = one["account"]
            assert kept["measured"] and kept["queue_wait_s"] is None and kept["gpu_hours"] == 0.0
            assert sum(kept["buckets"].values()) == pytest.approx(one["seconds"], abs=0.01)
            assert kept["buckets"]["productive_s"] > 0 and set(kept["buckets"]) == set(account.BUCKETS)
