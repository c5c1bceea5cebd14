"""Configurations: runs that differ only in seed, aggregated, on run directories written as training
writes them (provenance.build's record, schema-checked, and a metrics.csv) with chosen numbers."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import pytest

from snakeddp import config as configuration
from snakeddp.cluster import Layout
from snakeddp.config import parts
from snakeddp.data.custom import describe
from snakeddp.provenance import record as provenance
from snakeddp.provenance.schema import validate_file
from snakeddp.report import configurations, figures, html, table, tuning
from snakeddp.run import tries
from snakeddp.run.layout import RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.run.runs import Run, load_run
from snakeddp.util.hashing import sha256_file, sha256_json
from tests.helpers import TINY, merged, write_dataset

LAYOUT = Layout(launcher="direct", rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0, num_nodes=1,
                master_addr="127.0.0.1", master_port=29500)  # fmt: skip
RANK = [{"rank": 0, "local_rank": 0, "node_rank": 0, "host": "node1", "node": None, "pid": 100, "device": "cpu"}]
PHASES = ("startup_s", "train_loop_s", "validation_s", "checkpoint_s", "teardown_s", "total_s")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), configuration.validate(TINY)["data"])


def write_run(root: Path, manifest: Path, point: dict, val_loss: list[float], val_acc: list[float],
              monitor: dict | None = None, earlier: tuple[dict, ...] = ()) -> Run:  # fmt: skip
    """A finished run of TINY at the sweep ``point``, one epoch per value, read back as the report reads it;
    ``earlier``: tries before the one that completed (snakeddp.run.tries entries)."""
    overrides: dict = {"trainer": {"monitor": monitor}} if monitor else {}
    for key, value in point.items():
        *parents, leaf = key.split(".")
        section = overrides
        for parent in parents:
            section = section.setdefault(parent, {})
        section[leaf] = value
    run_id = "_".join(f"{key.rsplit('.', 1)[-1]}-{value}" for key, value in point.items()) or "base"
    cfg = configuration.validate(merged(TINY, overrides))
    paths = RunPaths(root / "runs" / run_id)
    rows = [{"epoch": epoch, "partition": epoch % 3, "samples": 900, "train_loss": 1.0 - 0.1 * epoch,
             "val_loss": loss, "val_acc": acc, "train_seconds": 0.5, "samples_per_s": 1000.0 + epoch}
            for epoch, (loss, acc) in enumerate(zip(val_loss, val_acc, strict=True))]  # fmt: skip
    paths.checkpoints.mkdir(parents=True)
    with paths.metrics.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    verdict = provenance.ranking(rows, parts.thaw(parts.Trainer.of(cfg["trainer"]).monitor))
    best = paths.checkpoints / f"epoch{verdict['best_epoch']:03d}.ckpt"
    best.write_bytes(b"weights")
    (paths.checkpoints / "last.ckpt").write_bytes(b"last")
    for entry in earlier:
        tries.append(paths.folder, entry)
    attempt = provenance.Attempt(
        run=RunFile(run_id=run_id, config=configuration.run_config(cfg), point=point), run_dir=paths.folder,
        manifest=manifest, manifest_sha256=sha256_file(manifest), environment_record=None,
        key=sha256_json([run_id, point]), resume_from=None, locked=True,
    )  # fmt: skip
    outcome = provenance.Outcome(
        started_at="2026-01-01T00:00:00+00:00", seconds=2.0, world_size=1, metrics=rows, best_checkpoint=str(best),
        best_score=verdict["best_score"], last_checkpoint=str(paths.checkpoints / "last.ckpt"), stopped_early=False,
        ranks=RANK, phases=lambda: dict.fromkeys(PHASES, 0.5),
    )  # fmt: skip
    data = describe(object(), manifest, sha256_file(manifest))
    record = provenance.build(attempt, LAYOUT, outcome, data=data, user_code=[], tracking=None)
    validate_file(provenance.write(paths.folder, record))
    return load_run(paths.folder)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, manifest) -> list[Run]:
    """2 learning rates x 2 seeds. lr 0.001 has the single best run (seed 1: 0.2) but the worse mean."""
    root = tmp_path_factory.mktemp("sweep")
    best_losses = {(0.001, 1): 0.2, (0.001, 2): 0.9, (0.1, 1): 0.3, (0.1, 2): 0.4}
    return [
        write_run(root, manifest, {"model.lr": lr, "seed": seed}, [loss + 0.1, loss, loss + 0.05], [0.6, 0.7, 0.8])
        for (lr, seed), loss in best_losses.items()
    ]


def test_runs_that_differ_only_in_seed_are_one_configuration_with_mean_spread_and_count(sweep, tmp_path):
    groups = configurations.group(sweep)
    assert [(g.name, g.params, g.seeds) for g in groups] == [
        ("lr=0.001", {"model.lr": 0.001}, [1, 2]),
        ("lr=0.1", {"model.lr": 0.1}, [1, 2]),
    ]
    written = configurations.write_table(sweep, tmp_path / "configurations.csv")
    with (tmp_path / "configurations.csv").open(newline="") as handle:
        rows = {row["configuration"]: row for row in csv.DictReader(handle)}
    assert list(rows) == ["lr=0.001", "lr=0.1"] and len(written.rows) == 2
    for name, losses in {"lr=0.001": [0.2, 0.9], "lr=0.1": [0.3, 0.4]}.items():
        row = rows[name]
        assert row["seeds"] == "2" and row["monitor"] == "val_loss (min)"
        assert float(row["best_score:mean"]) == pytest.approx(statistics.mean(losses))
        assert float(row["best_score:sample_std"]) == pytest.approx(statistics.stdev(losses))  # n - 1
        assert float(row["final:val_loss:mean"]) == pytest.approx(statistics.mean(loss + 0.05 for loss in losses))
        # The best checkpoint is epoch 1 (val_acc 0.7 there); the best val_acc is the last epoch's 0.8.
        assert float(row["at_best:val_acc:mean"]) == pytest.approx(0.7)
        assert float(row["best:val_acc:mean"]) == pytest.approx(0.8)
        assert float(row["best:val_acc:sample_std"]) == 0.0
    assert float(rows["lr=0.1"]["param:model.lr"]) == 0.1 and rows["lr=0.1"]["runs"] == "lr-0.1_seed-1 lr-0.1_seed-2"


def test_best_ranks_configurations_by_their_mean_not_by_one_lucky_seed(sweep):
    groups = configurations.group(sweep)
    assert min(sweep, key=lambda run: run.best_score).run_id == "lr-0.001_seed-1"
    assert [g.name for g in configurations.ranked(groups)] == ["lr=0.1", "lr=0.001"]
    card = html._best(groups)
    assert (card["name"], card["runs"], card["tied"]) == ("lr=0.1", 2, [])
    assert card["score"].mean == pytest.approx(0.35)


def test_equal_means_rank_more_seeds_then_the_smaller_spread_first_and_are_named_as_ties(tmp_path, manifest):
    top = {"metric": "val_acc", "mode": "max"}
    runs = [
        write_run(tmp_path, manifest, {"model.lr": lr, "seed": seed}, [0.5], [acc], monitor=top)
        for lr, seed, acc in [(0.01, 1, 0.7), (0.01, 2, 0.9), (0.1, 1, 0.79), (0.1, 2, 0.81), (0.5, 1, 0.8)]
    ]
    groups = configurations.group(runs[:4])
    ranked = configurations.ranked(groups)
    assert [g.name for g in ranked] == ["lr=0.1", "lr=0.01"], "same mean 0.8 and seeds: the smaller spread first"
    assert configurations.tied(ranked[0], ranked) == ["lr=0.01"]
    extra = write_run(tmp_path, manifest, {"model.lr": 0.5, "seed": 2}, [0.5], [0.8], monitor=top)
    ranked = configurations.ranked(configurations.group([*runs, extra]))
    assert [g.name for g in ranked] == ["lr=0.5", "lr=0.1", "lr=0.01"], "no spread at all beats a small one"
    assert "tied with lr=0.1, lr=0.01" in html.render(
        [*runs, extra], {"title": "t", "metrics": ["val_acc"]}, figure(tmp_path, [*runs, extra]), None
    )


def figure(tmp_path: Path, runs: list[Run]) -> Path:
    path = tmp_path / "curves.png"
    figures.write(figures.curves(runs, ["val_loss", "val_acc"]), path, "png", 40, tmp_path / "curves.json")
    return path


def test_the_axis_is_logarithmic_when_the_values_span_two_decades():
    assert configurations.log_axis([0.001, 0.01, 0.1])
    assert configurations.log_axis([1, 100])
    assert not configurations.log_axis([1, 99])
    assert not configurations.log_axis([0, 1, 1000]), "zero has no place on a log axis"
    assert not configurations.log_axis([-1, 100])
    points = [
        {"model.lr": 0.001, "seed": 1, "launch.devices": 1, "model.optimizer": "adam", "trainer.flag": True},
        {"model.lr": 0.1, "seed": 2, "launch.devices": 1, "model.optimizer": "sgd", "trainer.flag": False},
    ]
    assert configurations.numeric_keys(points) == ["model.lr"], "not seed, one value, text or a switch"


def test_the_hyperparameter_figure_plots_each_configurations_mean_and_spread_on_a_log_axis(sweep):
    fig = tuning.tuning(sweep, ["model.lr"])
    series = {s["gid"]: s for s in figures.plotted_series(fig)}
    assert fig.axes[0].get_xscale() == "log", "0.001 to 0.1: two decades"
    for name, lr, losses in (("lr=0.001", 0.001, [0.2, 0.9]), ("lr=0.1", 0.1, [0.3, 0.4])):
        assert series[f"mean|model.lr|{name}"]["x"] == [lr]
        assert series[f"mean|model.lr|{name}"]["y"] == pytest.approx([statistics.mean(losses)])
        (x, low), (_, high) = series[f"spread|model.lr|{name}"]["segments"]
        sd = statistics.stdev(losses)
        assert (x, low, high) == pytest.approx((lr, statistics.mean(losses) - sd, statistics.mean(losses) + sd))
    assert series["series|model.lr|all"]["x"] == [0.001, 0.1]


def test_epochs_are_counted_from_one_on_the_page_in_the_figures_and_in_runs_csv(sweep, tmp_path):
    rows = table.runs_rows(sweep).records()
    assert [row["best_epoch"] for row in rows] == [2, 2, 2, 2], "epoch index 1 of 0, 1, 2"
    series = {s["gid"]: s for s in figures.plotted_series(figures.curves(sweep, ["val_loss"]))}
    assert series["curve|lr=0.1|val_loss"]["x"] == [1.0, 2.0, 3.0]
    assert series["curve|lr=0.1|val_loss"]["y"] == pytest.approx([0.45, 0.35, 0.4])
    band = series["band|lr=0.1|val_loss"]
    assert band["x"] == [1.0, 2.0, 3.0] and band["low"] == pytest.approx([0.4, 0.3, 0.35])
    assert band["high"] == pytest.approx([0.5, 0.4, 0.45])
    assert {series[f"best|{run.run_id}"]["x"][0] for run in sweep} == {2.0}
    page = html.render(sweep, {"title": "t", "metrics": ["val_loss"]}, figure(tmp_path, sweep), None)
    assert page.count("in epoch 2</dd>") == 4
    cells = re.findall(
        r'<tr data-run="[^"]+"><td><a[^>]*>[^<]*</a></td><td><code>[^<]*</code></td>\n<td class="num">(\d+)', page
    )
    assert cells == ["2"] * 4


def test_a_single_run_without_a_sweep_is_one_configuration_without_a_band(tmp_path, manifest):
    run = write_run(tmp_path, manifest, {}, [0.5, 0.4], [0.9, 0.9545])
    (group,) = configurations.group([run])
    assert (group.name, group.params, group.score.std) == ("base", {}, None)
    rows = configurations.table([run], [group]).records()
    assert rows[0]["seeds"] == 1 and rows[0]["best_score:sample_std"] is None
    assert not [s for s in figures.plotted_series(figures.curves([run], ["val_loss"])) if s["gid"].startswith("band|")]
    page = html.render([run], {"title": "t", "metrics": ["val_loss"]}, figure(tmp_path, [run]), None)
    card = re.search(r'id="card-best">(.*?)</div></div>', page, re.S).group(1)
    assert "best run" in card and "val_loss 0.4," in card and "val_acc 0.9545" in card, card
    assert 'id="global-batch"' not in page


def test_a_run_that_hung_once_shows_its_tries_and_their_goodput_on_the_page_and_in_runs_csv(tmp_path, manifest):
    line = "snakeddp.train: run base hung: rank 1 on node n2 (host h) (pid 77) stopped advancing ..."
    culprit = {"rank": 1, "host": "h", "node": "n2", "pid": 77, "step": 130, "epoch": 1, "phase": "backward"}
    hang = {"kind": "stopped", "culprit": culprit, "stalled_s": 61.0, "limit_s": 60.0, "reached_step": 140}
    hang["line"] = line
    hung = tries.entry(started=1e9, ended=1e9 + 100, outcome="hung", exit_code=1, launcher="srun", job_id="8",
                       resumed_from=None, saved_now={"step": 100, "epoch": 1, "saved_at": 1e9 + 40}, hang=hang,
                       placement={"nodes": ["n2"], "excluded_nodes": []})  # fmt: skip
    never = {"kind": "never_joined", "culprit": None, "missing": [3], "missing_nodes": ["n4"], "stalled_s": None,
             "limit_s": 180.0, "reached_step": None, "line": "snakeddp.train: run base: rank 3 never came"}  # fmt: skip
    joined = tries.entry(started=1e9 + 200, ended=1e9 + 390, outcome="hung", exit_code=1, launcher="srun",
                         job_id="9", resumed_from={"step": 100, "epoch": 1, "saved_at": 1e9 + 40}, saved_now=None,
                         hang=never, placement={"nodes": ["n1", "n4"], "excluded_nodes": ["n2"]})  # fmt: skip
    run = write_run(tmp_path, manifest, {}, [0.5, 0.4], [0.9, 0.95], earlier=(hung, joined))
    (row,) = table.runs_rows([run]).records()
    assert (row["tries"], row["lost_hung_s"], row["lost_steps"]) == (3, 250.0, 40)
    assert row["lost_preempted_s"] == 0 and 0 < row["goodput"] < 1
    page = html.render([run], {"title": "t", "metrics": ["val_loss"]}, figure(tmp_path, [run]), None)
    tried = re.search(r'<table class="tries">(.*?)</table>', page, re.S).group(1)
    assert "rank 1 on n2 (pid 77) stopped advancing at step 130" in tried
    assert "never joined: ranks 3" in tried and "<td>n2</td>" in tried and "completed" in tried
    assert "hung lost 4.2 min (40 steps trained again)" in page
