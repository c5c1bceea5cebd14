"""The benchmark harness runs and reports every benchmark (tiny sizes; timings are not asserted)."""

import ast
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench import report
from bench.__main__ import main as bench_main
from bench.benchmarks import BENCHMARKS, REGISTERED
from bench.harness import WARM_SOCKET, alternate, child_env
from tests.helpers import REPO, subprocess_env


def run_bench(results, *names, timeout=900):
    env = subprocess_env(PYTHONPATH=f"{REPO / 'src'}:{REPO}")
    done = subprocess.run(
        [sys.executable, "-m", "bench", *names, "--tiny", "--results", str(results)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"python -m bench failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return json.loads((results / "results.json").read_text())["benchmarks"]


def check_reported(results, benchmarks, names):
    table = (results / "results.md").read_text()
    assert "| figure | ours | baseline | ratio | limit | target | met? |" in table
    for name in names:
        bench = benchmarks[name]
        assert bench["figures"], f"{name} reported no figures"
        assert f"## {bench['title']}" in table
        for figure in bench["figures"]:
            assert math.isfinite(figure["ours"]), figure
            assert figure["ratio"] is None or math.isfinite(figure["ratio"]), figure
            assert f"| {figure['label']} |" in table
            assert figure["met"] is None or figure["target"], figure


def test_bench_imports_no_test_module():
    """The tests import bench's harness (bench.workflows.WorkflowDir); never the other way round."""
    for path in (REPO / "bench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [name for name in names if name.split(".")[0] == "tests"], path


def test_benchmarks_are_numbered_by_their_place_in_the_registry():
    """results.md's section N is BENCHMARKS[N - 1]: each module's TITLE starts with its number, and
    bench/benchmarks/ holds the registered modules and no other."""
    folder = REPO / "bench" / "benchmarks"
    assert {path.stem for path in folder.glob("*.py")} - {"__init__"} == set(REGISTERED)
    for number, name in enumerate(REGISTERED, start=1):
        tree = ast.parse((folder / f"{name}.py").read_text())
        titles = [
            node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["TITLE"]
        ]
        assert titles and titles[0].startswith(f"{number}. "), (name, titles)


def test_alternate_runs_cases_in_abba_order_and_drops_warmup():
    calls = []

    def case(name):
        def measure():
            calls.append(name)
            return {"n": len(calls)}

        return measure

    samples = alternate({"a": case("a"), "b": case("b")}, reps=3, warmup=1)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [s["n"] for s in samples["a"]] == [4, 5, 8]
    assert [s["n"] for s in samples["b"]] == [3, 6, 7]
    assert all(s["wall_s"] >= 0 for values in samples.values() for s in values)


def test_benchmarks_never_fork_from_a_warm_process_the_user_keeps(monkeypatch):
    """With `snakeddp warm`'s line exported in the shell, the processes a benchmark starts still measure an
    invocation as it runs by default, with its own warm process."""
    monkeypatch.setenv(WARM_SOCKET, "/tmp/snakeddp-warm-1-x/warm")
    assert WARM_SOCKET not in child_env() and child_env(threads=2)["OMP_NUM_THREADS"] == "2"


def scratch_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("snakeddp-bench-*"))


IN_PROCESS = ("partition_read", "input_pipeline")


def test_in_process_benchmarks_report_every_figure_and_keep_the_others(tmp_path):
    before = scratch_dirs()
    (tmp_path / report.NOTES).write_text("# notes\n\n## partition_read\n\n- Measured by hand on another day.\n")
    benchmarks = run_bench(tmp_path, *IN_PROCESS)
    check_reported(tmp_path, benchmarks, list(IN_PROCESS))
    first = benchmarks["input_pipeline"]["started_at"]
    benchmarks = run_bench(tmp_path, "partition_read")
    assert benchmarks["input_pipeline"]["started_at"] == first
    table = (tmp_path / "results.md").read_text()
    assert table.index("## 1. Partition read") < table.index("## 3. Input pipeline")
    section = table[table.index("## 1. Partition read") : table.index("## 3. Input pipeline")]
    own = benchmarks["partition_read"]["notes"][-1]
    assert section.index(f"- {own}") < section.index("- Measured by hand on another day."), "kept by the rerun"
    assert scratch_dirs() <= before, "the scratch data is deleted"


def test_the_committed_results_md_is_results_json_and_the_hand_notes_rendered():
    """results.md is written by the bench, never by hand: a finding measured outside it goes to notes.md."""
    folder = REPO / "bench"
    notes = report.hand_notes(folder / report.NOTES)
    assert notes and set(notes) <= set(REGISTERED), sorted(notes)
    data = report.in_order(report.load(folder / "results.json"), list(REGISTERED))
    assert (folder / "results.md").read_text() == report.markdown(data, notes)


def test_a_note_wrapped_onto_a_second_line_is_refused_and_joined_as_hinted_it_is_read(tmp_path, capsys):
    notes = tmp_path / report.NOTES
    notes.write_text("# notes\n\nFree text above the first heading.\n\n## sweep\n\n- A note that goes\n  on here.\n")
    with pytest.raises(ValueError, match=r"notes.md:8: a note is one line .*HINT: join it to the bullet above it"):
        report.hand_notes(notes)
    # `python -m bench` says so in one line before it runs anything.
    assert bench_main(["partition_read", "--tiny", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("HINT:") == 1 and not (tmp_path / "results.json").exists()
    notes.write_text(notes.read_text().replace("goes\n  on", "goes on"))
    assert report.hand_notes(notes) == {"sweep": ["A note that goes on here."]}


@pytest.mark.e2e
@pytest.mark.parametrize("name", [name for name in BENCHMARKS if name not in IN_PROCESS])
def test_benchmarks_that_start_processes_report_every_figure(tmp_path, name):
    """Results inside the checkout, where `python -m bench` writes them (bench/): the benchmarks that
    run snakemake must still run it outside the checkout, which it refuses to run in."""
    results = REPO / "bench" / "out" / f"test-{tmp_path.name}"
    try:
        benchmarks = run_bench(results, name)
        check_reported(results, benchmarks, [name])
    finally:
        shutil.rmtree(results, ignore_errors=True)


# One rank of the hand-written baseline, alone, on the tutorial's data: the threads it has left once main returns.
BASELINE_RANK = """
import glob, sys
from bench.baselines import handwritten_ddp, tutorial
tutorial.main(sys.argv[1], 1, 64, 32, 4)
manifest = f"{sys.argv[1]}/manifest.json"
sys.argv[1:] = ["--format", "pickle", "--manifest", manifest, "--epochs", "1", "--batch-size", "8"]
handwritten_ddp.main()
print(sorted(open(path).read().strip() for path in glob.glob("/proc/self/task/*/comm")))
"""


@pytest.mark.e2e
def test_the_handwritten_baseline_joins_gloos_threads_before_its_interpreter_exits(tmp_path):
    """destroy_process_group ends the group only with its last reference gone (the DDP model's, and that of torch's
    collectives imported after init_process_group): a gloo thread left running as Python finalizes can take the GIL
    and abort the rank ("terminate called without an active exception": bench 8, once in CI)."""
    env = child_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
    argv = [sys.executable, "-c", BASELINE_RANK, str(tmp_path)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    threads = ast.literal_eval(done.stdout.splitlines()[-1])
    assert not [name for name in threads if "gloo" in name], threads


def test_a_scope_holds_a_command_to_its_memory_limit_and_reads_its_cpu_and_peak(tmp_path):
    """bench.scope, as bench 14 uses it: a command that writes 96 MB (page cache, charged to the scope; synced every
    8 MB, as ingestion syncs, since cgroup v1 kills a group full of dirty pages the disk is slow to take) in a
    48 MiB scope, then spins the CPU for 0.4 s, finishes; the scope says the peak stayed at the limit, that it
    was met, and the CPU seconds of the span; its groups are gone afterwards."""
    import time

    from bench.scope import Scope

    script = (
        "import time, os\n"
        f"with open({str(tmp_path / 'big')!r}, 'wb') as f:\n"
        "    for i in range(96):\n"
        "        f.write(os.urandom(1 << 20))\n"
        "        if i % 8 == 7: f.flush(); os.fsync(f.fileno())\n"
        "end = time.process_time() + 0.4\n"
        "while time.process_time() < end: pass\n"
    )
    with Scope(f"snakeddp-test-{tmp_path.name}", 48) as scope:
        if scope.kind is None:  # no writable cgroup here: the command runs as it is, and nothing is read
            assert scope.wrap(["true"]) == ["true"] and scope.memory() == {}
            return
        start = time.perf_counter()
        subprocess.run(scope.wrap([sys.executable, "-c", script]), check=True)
        stop = time.perf_counter()
        memory = scope.memory()
        groups = list(scope.groups)
    assert (tmp_path / "big").stat().st_size == 96 << 20
    assert 5 < memory["peak_mb"] <= (48 << 20) / 1e6 and memory["failcnt"] > 0, memory
    assert 0.35 <= scope.cpu_between(start, stop) <= stop - start + 0.1
    assert scope.cpu_between(start, start) == 0.0
    assert not any(group.exists() for group in groups)
