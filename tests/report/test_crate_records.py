"""What the report's RO-Crate (snakeddp.report.crate) keeps of a run's tries and ranks: each hung try's evidence, of
the run's attempt and of an earlier finished attempt kept under attempts/, whose evidence moved there with it; and
on a GPU rank's pace, that it was read from the host's clock."""

from __future__ import annotations

import json
from pathlib import Path

from snakeddp import config as configuration
from snakeddp.cluster import pace
from snakeddp.cluster.hang import Position
from snakeddp.provenance.schema import validate_file
from snakeddp.report.page import write_crate
from snakeddp.run import tries
from snakeddp.run.layout import AttemptPaths
from snakeddp.run.runs import load_run
from tests.helpers import REPO, TINY, write_dataset
from tests.report.test_configurations import write_run


def hung(number: int) -> dict:
    culprit = {"rank": 1, "host": "h", "node": f"n{number}", "pid": 70 + number, "step": 5, "epoch": 0,
               "phase": "backward"}  # fmt: skip
    hang = {"kind": "stopped", "culprit": culprit, "stalled_s": 61.0, "limit_s": 60.0, "reached_step": 6}
    hang["line"] = f"snakeddp.train: run base hung: rank 1 on node n{number} ... HINT: rerun"
    return tries.entry(started=1e9 + 100 * number, ended=1e9 + 100 * number + 70, outcome="hung", exit_code=1,
                       launcher="srun", job_id=str(number), resumed_from=None, saved_now=None, hang=hang)  # fmt: skip


def evidence(attempt: AttemptPaths, number: int, text: str) -> None:
    folder = attempt.hang_of(number)
    folder.mkdir(parents=True)
    (folder / "stacks.txt").write_text(text)
    (folder / "gpu.json").write_text(json.dumps({"rank": 1, "device": "cpu", "state": None, "why": "the CPU"}))


def crate_of(run) -> tuple[Path, list[dict]]:
    """The crate the report writes of ``run`` (read back from its directory): its folder and its graph."""
    config = configuration.validate({})
    report = run.run_dir.parent.parent / "report"
    report.mkdir()
    (report / "report.html").write_text("<html><title>snakeddp runs</title></html>")
    write_crate(runs=[load_run(run.run_dir)], settings=config["report"], repo=REPO,
                config_files=[REPO / "config" / "config.yaml"], resolved_config=config,
                report_files=[report / "report.html"], out=report / "ro-crate-metadata.json")  # fmt: skip
    return report, json.loads((report / "ro-crate-metadata.json").read_text())["@graph"]


def test_the_crate_lists_every_hung_trys_evidence_of_the_run_and_of_its_earlier_attempt(tmp_path):
    manifest = write_dataset(tmp_path / "data", configuration.validate(TINY)["data"])  # inside the workflow's folder
    earlier = write_run(tmp_path / "earlier", manifest, {}, [0.5], [0.9], earlier=(hung(1),))
    evidence(earlier.paths, 1, "the earlier attempt's try 1")
    run = write_run(tmp_path / "results", manifest, {}, [0.5, 0.4], [0.9, 0.95], earlier=(hung(1), hung(2)))
    (run.run_dir / "run.yaml").write_text("run_id: base\n")  # the run_config rule's, which the crate copies
    evidence(run.paths, 1, "try 1")
    evidence(run.paths, 2, "try 2")
    (run.paths.hang_evidence / ".try-3.77.partial").mkdir()  # being written by a rank now: not the crate's
    (run.paths.hang_evidence / ".try-3.77.partial" / "stacks.txt").write_text("half")
    kept = run.run_dir / "attempts" / "aaaaaaaaaaaa"
    kept.parent.mkdir()
    earlier.run_dir.rename(kept)
    report, graph = crate_of(run)
    listed = {entity["@id"]: entity for entity in graph if entity["@id"].startswith("files/runs/base/")}
    hang = {name: entity for name, entity in listed.items() if "/hang/" in name}
    assert sorted(hang) == [
        "files/runs/base/attempts/aaaaaaaaaaaa/hang/try-1/gpu.json",
        "files/runs/base/attempts/aaaaaaaaaaaa/hang/try-1/stacks.txt",
        "files/runs/base/hang/try-1/gpu.json",
        "files/runs/base/hang/try-1/stacks.txt",
        "files/runs/base/hang/try-2/gpu.json",
        "files/runs/base/hang/try-2/stacks.txt",
    ]
    assert hang["files/runs/base/hang/try-2/stacks.txt"]["description"].endswith("(faulthandler); try 2")
    for name, text in [("hang/try-1", "try 1"), ("hang/try-2", "try 2"),
                       ("attempts/aaaaaaaaaaaa/hang/try-1", "the earlier attempt's try 1")]:  # fmt: skip
        assert (report / "files/runs/base" / name / "stacks.txt").read_text() == text
    assert "files/runs/base/attempts/aaaaaaaaaaaa/provenance.json" in listed


def test_a_gpu_ranks_pace_says_it_was_read_from_the_hosts_clock_and_a_cpu_ranks_needs_not(tmp_path):
    """Two ranks scored by rank 0's watch (cluster.pace), one on a GPU: both records carry clock host, valid as
    provenance.schema.json defines them; the crate's pace of the GPU rank says what the host's clock cannot see."""
    manifest = write_dataset(tmp_path / "data", configuration.validate(TINY)["data"])
    run = write_run(tmp_path / "results", manifest, {}, [0.5, 0.4], [0.9, 0.95])
    (run.run_dir / "run.yaml").write_text("run_id: base\n")
    paces = pace.Paces(pace.Straggler(pace.NAME, 0.7, 60.0))
    posts = [Position(r, "node1", 100 + r, None, 50, 0, "backward", 0.01, at, at, device, steps, steps * own)
             for at, steps in ((1000.0, 100), (1004.0, 500))
             for r, device, own in ((0, "cuda:0 GPU-8a6f", 0.008), (1, "cpu", 0.004))]  # fmt: skip
    paces.update(posts[:2], 1000.0)
    paces.update(posts[2:], 1004.0)
    scores = paces.scores()
    assert [scores[r]["clock"] for r in (0, 1)] == ["host", "host"] and scores[0]["relative"] == 0.5
    record = json.loads(run.paths.provenance.read_text())
    ranks = [dict(record["launch"]["ranks"][0], device="cuda:0"), dict(record["launch"]["ranks"][0], rank=1, pid=101)]
    pace.into_ranks(ranks, scores)
    record["launch"]["ranks"] = ranks
    run.paths.provenance.write_text(json.dumps(record))
    validate_file(run.paths.provenance)
    _, graph = crate_of(run)
    described = {e["@id"]: e["description"] for e in graph if e["@id"].endswith("-pace")}
    said = "read from the host's clock, which sees a slow GPU kernel only where the host waits for it"
    assert described["#base-rank-0-pace"].endswith(f"(1 is the fastest); {said}"), described
    assert described["#base-rank-1-pace"].endswith("(1 is the fastest)"), described
