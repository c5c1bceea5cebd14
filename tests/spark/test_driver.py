"""The Spark driver's settings and its one-line verdicts (the real driver runs in test_spark_profile.py)."""

import argparse
import json
from pathlib import Path

from snakeddp.run import variables
from snakeddp.spark import driver


def args_for(tmp_path: Path, **kw) -> argparse.Namespace:
    argv = [f"--num-processes={kw.get('n', 2)}", "--threads=1", "--", "--config", "x"]
    args, entry = driver.parse_args([*argv, "--run-dir", str(tmp_path), "--launcher", "torchdistributor"])
    assert entry[-2:] == ["--launcher", "torchdistributor"] and args.failure_file == tmp_path / "failure.txt"
    return args


def test_settings_ask_for_the_ranks_slots_fail_fast_and_keep_temporary_files_with_the_run(tmp_path):
    args = args_for(tmp_path)
    section = {"master": None, "conf": {"spark.executor.memory": "2g", "spark.ui.enabled": True}}
    settings = driver.spark_settings(args, section, "spark://127.0.0.1:7077", tmp_path / "spark")
    assert settings["spark.cores.max"] == "2" and settings["spark.task.cpus"] == "1"
    assert settings["spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"] == "3"
    assert settings["spark.local.dir"] == str(tmp_path / "spark" / "local")
    assert settings["spark.executorEnv.TMPDIR"] == str(tmp_path / "spark" / "tmp")
    assert settings["spark.executor.memory"] == "2g" and settings["spark.ui.enabled"] == "true"  # the config's win
    assert "spark.cores.max" not in driver.spark_settings(args, section, "databricks", tmp_path)


def test_the_ranks_get_the_train_jobs_variables_but_not_the_spark_section(tmp_path):
    env = {
        "SNAKEDDP_PLATFORM": "spark",
        variables.SPARK_CONFIG: json.dumps({"conf": {"spark.authenticate.secret": "s3cr3t"}}),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PATH": "/usr/bin",
    }
    ranks = driver.rank_environment(env, "app-1", "spark://h:7077", tmp_path)
    assert ranks["SNAKEDDP_PLATFORM"] == "spark" and ranks["GLOO_SOCKET_IFNAME"] == "lo"
    assert ranks["SNAKEDDP_SPARK_APP_ID"] == "app-1" and ranks["TMPDIR"] == str(tmp_path / "tmp")
    assert variables.SPARK_CONFIG not in ranks and "PATH" not in ranks


def test_a_spark_job_failure_is_one_line_naming_what_happened(tmp_path):
    args = args_for(tmp_path, n=3)
    lost = RuntimeError(
        "An error occurred while calling o49.collectToPython.\n: org.apache.spark.SparkException: Job aborted due "
        "to stage failure: Could not recover from a failed barrier ResultStage. Most recent failure reason: "
        "Stage failed because barrier task ResultTask(0, 1) finished unsuccessfully.\nExecutorLostFailure "
        "(executor 1 exited caused by one of the running tasks) Reason: Command exited with code 137"
    )
    line = driver.failure_line(args, lost)
    assert line.startswith("Spark executor 1 was lost mid-training") and line.count("HINT:") == 1
    assert "\n" not in line and "resumes from its last.ckpt" not in line  # no last.ckpt in this run yet
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert "resumes from its last.ckpt" in driver.failure_line(args, lost)
    slots = RuntimeError(
        "[SPARK-24819]: Barrier execution mode does not allow run a barrier stage that requires more slots "
        "than the total number of slots in the cluster currently."
    )
    assert "fewer free task slots than the run's 3 ranks" in driver.failure_line(args, slots)
    assert "no rank wrote provenance.json" in driver.failure_line(args, None)
