"""snakeddp prune: which earlier attempts lose their checkpoints."""

import json
import re

import pytest

from snakeddp.cli import main
from snakeddp.run.prune import plan, prune


def attempt(run_dir, short, finished_at, best_val_loss):
    """An earlier finished attempt as attempts/<id>/ holds it: its record and one checkpoint."""
    home = run_dir / "attempts" / short
    (home / "checkpoints").mkdir(parents=True)
    (home / "checkpoints" / "last.ckpt").write_bytes(b"x" * 10)
    record = {
        "run_id": "base",
        "origin_sha256": short + "0" * 52,
        "timing": {"finished_at": finished_at},
        "training": {"best_val_loss": best_val_loss},
    }
    (home / "provenance.json").write_text(json.dumps(record))
    return home


@pytest.fixture
def run_dir(tmp_path):
    """A run directory whose current attempt finished: its provenance.json (prune reads no more of it)."""
    (tmp_path / "provenance.json").write_text("{}")
    return tmp_path


def test_keeps_the_best_and_the_last_attempts(run_dir):
    oldest_best = attempt(run_dir, "a" * 12, "2026-01-01T00:00:00", 0.1)
    middle = attempt(run_dir, "b" * 12, "2026-01-02T00:00:00", 0.5)
    newest = attempt(run_dir, "c" * 12, "2026-01-03T00:00:00", 0.9)
    assert [p.path for p in plan([run_dir], best=1, last=1)] == [middle / "checkpoints"]
    assert {p.path for p in plan([run_dir], best=0, last=0)} == {
        home / "checkpoints" for home in (oldest_best, middle, newest)
    }
    assert [p.path for p in prune([run_dir], best=0, last=2, dry_run=True)] == [oldest_best / "checkpoints"]
    assert (oldest_best / "checkpoints").is_dir(), "a dry run removes nothing"
    removed = prune([run_dir], best=1, last=1, dry_run=False)
    assert [(p.path, p.size) for p in removed] == [(middle / "checkpoints", 10)]
    assert not (middle / "checkpoints").exists() and (middle / "provenance.json").is_file()


def test_a_run_whose_current_attempt_has_not_finished_keeps_its_last_finished_attempt(tmp_path):
    """Its only model (`snakeddp runs` lists the run as it, RUN@ID), whatever --best and --last say; the others go
    as they say."""
    oldest_best = attempt(tmp_path, "a" * 12, "2026-01-01T00:00:00", 0.1)
    middle = attempt(tmp_path, "b" * 12, "2026-01-02T00:00:00", 0.5)
    newest = attempt(tmp_path, "c" * 12, "2026-01-03T00:00:00", 0.9)
    assert [p.path for p in plan([tmp_path], best=0, last=0)] == [oldest_best / "checkpoints", middle / "checkpoints"]
    assert [p.path for p in plan([tmp_path], best=1, last=0)] == [middle / "checkpoints"]
    prune([tmp_path], best=0, last=0, dry_run=False)
    assert (newest / "checkpoints" / "last.ckpt").is_file() and not (middle / "checkpoints").exists()


def test_prune_says_each_size_as_prune_data_does(tmp_path, capsys):
    """In bytes, kB, MB, GB as `prune --data` (and `df -H`): a small attempt's checkpoints read 0.0 MiB."""
    run_dir = tmp_path / "runs" / "base"
    attempt(run_dir, "a" * 12, "2026-01-01T00:00:00", 0.1)
    (attempt(run_dir, "b" * 12, "2026-01-02T00:00:00", 0.5) / "checkpoints" / "last.ckpt").write_bytes(b"x" * 33_000)
    attempt(run_dir, "c" * 12, "2026-01-03T00:00:00", 0.9)  # the run's last finished attempt: kept
    assert main(["prune", "--best", "0", "--last", "0", "--dry-run", "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"base@{'a' * 12}: would remove {run_dir / 'attempts' / ('a' * 12) / 'checkpoints'} (10 B)",
        f"base@{'b' * 12}: would remove {run_dir / 'attempts' / ('b' * 12) / 'checkpoints'} (33.0 kB)",
        "would remove the checkpoints of 2 earlier attempt(s), 33.0 kB; records and metrics stay",
    ]


def test_a_negative_count_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["prune", "--best", "-1"])
    assert "HINT: give 0 or a positive whole number" in capsys.readouterr().err


def test_what_was_pruned_is_recorded_beside_the_attempts_record(run_dir):
    """`snakeddp verify` and a restore tell pruned checkpoints from lost ones by it (prune left no trace)."""
    home = attempt(run_dir, "a" * 12, "2026-01-01T00:00:00", 0.1)
    (home / "checkpoints" / "epoch002-val_loss0.1000.ckpt").write_bytes(b"y" * 7)
    prune([run_dir], best=0, last=0, dry_run=True)
    assert not (home / "pruned.json").exists(), "a dry run writes nothing"
    prune([run_dir], best=0, last=0, dry_run=False)
    record = json.loads((home / "pruned.json").read_text())
    assert record["command"] == "snakeddp prune --best 0 --last 0" and record["bytes"] == 17
    assert record["removed"] == [
        {"path": "checkpoints/epoch002-val_loss0.1000.ckpt", "bytes": 7},
        {"path": "checkpoints/last.ckpt", "bytes": 10},
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", record["pruned_at"]), record
    assert not (home / "checkpoints").exists() and (home / "provenance.json").is_file()


def unfinished(run_dir, short, ended_at):
    """An attempt kept under attempts/<id>/ that never finished: its checkpoints and metrics.csv, no record."""
    home = run_dir / "attempts" / short
    (home / "checkpoints").mkdir(parents=True)
    (home / "checkpoints" / "last.ckpt").write_bytes(b"x" * 7)
    (home / "metrics.csv").write_text(f"epoch,val_loss,finished_at\n0,0.5,{ended_at}\n")
    return home


def test_unfinished_attempts_are_pruned_as_the_last_count_says_and_set_aside_where_no_attempt_resumes(run_dir):
    """An interrupted attempt set aside by another config's kept its checkpoints whatever prune was told: prune read
    only finished attempts' records."""
    best = attempt(run_dir, "a" * 12, "2026-01-01T00:00:00", 0.1)
    middle = attempt(run_dir, "b" * 12, "2026-01-02T00:00:00", 0.5)
    newest = unfinished(run_dir, "c" * 12, "2026-01-03T00:00:00")
    assert [p.path for p in plan([run_dir], best=1, last=1)] == [middle / "checkpoints"]
    assert [p.path for p in plan([run_dir], best=1, last=0)] == [middle / "checkpoints", newest / "checkpoints"]
    assert [p.path for p in plan([run_dir], best=3, last=0)] == [newest / "checkpoints"], "it has no score to rank"
    removed = prune([run_dir], best=1, last=0, dry_run=False)
    assert [(p.path, p.size) for p in removed] == [(middle / "checkpoints", 10), (newest / "checkpoints", 7)]
    assert removed[1].attempt.label == f"{run_dir.name}@{'c' * 12}"
    aside = run_dir / "attempts" / f"{'c' * 12}-pruned"
    assert not newest.exists() and (aside / "metrics.csv").is_file() and not (aside / "checkpoints").exists()
    assert json.loads((aside / "pruned.json").read_text())["removed"] == [{"path": "checkpoints/last.ckpt", "bytes": 7}]
    assert (best / "checkpoints").is_dir() and plan([run_dir], best=1, last=0) == [], "nothing left to prune"
