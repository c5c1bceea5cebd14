"""snakeddp.remote.attempt: a remote job's run directory coming back into results/runs/<run>/."""

from snakeddp.remote.attempt import collect


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_job_files_replace_the_local_attempt_and_provenance_comes_last(tmp_path):
    run_dir, job = tmp_path / "run", tmp_path / "download" / "run_dir"
    write(run_dir / "run.yaml", "config")
    write(run_dir / "checkpoints" / "last.ckpt", "old")
    write(run_dir / "checkpoints" / "epoch000.ckpt", "pruned by the job")
    write(run_dir / "metrics.csv", "epoch\n0\n")
    write(job / "checkpoints" / "last.ckpt", "new")
    write(job / "checkpoints" / "epoch002.ckpt", "best")
    write(job / "metrics.csv", "epoch\n0\n1\n2\n")
    write(job / "run-state.json", "{}")
    write(job / "provenance.json", "{}")
    write(job / ".snakeddp-resume-seeded", "job-1")
    assert collect(job, run_dir)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch002.ckpt", "last.ckpt"]
    assert (run_dir / "checkpoints" / "last.ckpt").read_text() == "new"
    assert (run_dir / "metrics.csv").read_text() == "epoch\n0\n1\n2\n"
    assert (run_dir / "provenance.json").is_file() and (run_dir / "run.yaml").read_text() == "config"
    assert not (run_dir / ".snakeddp-resume-seeded").exists(), "job bookkeeping stays behind"
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".replaced")]


def test_a_job_that_wrote_nothing_leaves_the_run_directory_alone(tmp_path):
    run_dir, job = tmp_path / "run", tmp_path / "download" / "run_dir"
    write(run_dir / "checkpoints" / "last.ckpt", "from an earlier attempt")
    write(job / "metrics.csv", "epoch\n")
    assert not collect(job, run_dir)
    assert (run_dir / "checkpoints" / "last.ckpt").read_text() == "from an earlier attempt"
    assert not (run_dir / "metrics.csv").exists()
