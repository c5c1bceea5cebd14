"""The Spark driver's settings and its one-line verdicts (the real driver runs in test_spark_profile.py)."""

import argparse
import json
from pathlib import Path

from snakeddp import launch
from snakeddp.config.parts import Launch
from snakeddp.run import status, tries, variables
from snakeddp.run.runfile import RunFile
from snakeddp.spark import driver, session, sharing
from snakeddp.spark.settings import Settings, from_environment
from tests.helpers import prepare


def args_for(tmp_path: Path, **kw) -> argparse.Namespace:
    argv = [f"--num-processes={kw.get('n', 2)}", "--threads=1", "--", "--config", "x"]
    args, entry = driver.parse_args([*argv, "--run-dir", str(tmp_path), "--launcher", "torchdistributor"])
    assert entry[-2:] == ["--launcher", "torchdistributor"] and args.failure_file == tmp_path / "failure.txt"
    return args


def shape_of(args: argparse.Namespace) -> session.Shape:
    return session.Shape(args.run_dir.name, args.num_processes, args.threads, args.gpu)


def test_settings_ask_for_the_ranks_slots_fail_fast_and_keep_temporary_files_with_the_run(tmp_path):
    args = args_for(tmp_path)
    conf = {"spark.executor.memory": "2g", "spark.ui.enabled": True}
    section = Settings.of({"master": None, "conf": conf})
    settings = session.spark_settings(shape_of(args), section, "spark://127.0.0.1:7077", tmp_path / "spark")
    assert settings["spark.cores.max"] == "2" and settings["spark.task.cpus"] == "1"
    assert settings["spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"] == "3"
    assert settings["spark.local.dir"] == str(tmp_path / "spark" / "local")
    assert settings["spark.executorEnv.TMPDIR"] == str(tmp_path / "spark" / "tmp")
    assert settings["spark.executor.memory"] == "2g" and settings["spark.ui.enabled"] == "true"  # the config's win
    assert "spark.cores.max" not in session.spark_settings(shape_of(args), section, "databricks", tmp_path)
    # Its JVMs start on the JIT's first tier and the serial collector; the cluster's executor options are
    # kept, with their own collector (two would stop the JVM), and the config's replace them.
    assert settings["spark.driver.extraJavaOptions"].endswith(" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    # The driver JVM's own temporary folder too (spark-submit makes it before spark.local.dir is read; in /tmp, a
    # killed JVM left it behind).
    assert f"-Djava.io.tmpdir={tmp_path / 'spark' / 'tmp'}" in settings["spark.driver.extraJavaOptions"].split()
    assert settings["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    theirs = {"spark.executor.extraJavaOptions": "-XX:+UseG1GC -Dsite=x"}
    executor = session.spark_settings(shape_of(args), section, "spark://h:7077", tmp_path, theirs)
    assert executor["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseG1GC -Dsite=x"
    given = Settings.of({"master": None, "conf": {**conf, "spark.executor.extraJavaOptions": "-Dmine=1"}})
    mine = session.spark_settings(shape_of(args), given, "spark://h:7077", tmp_path, theirs)
    assert mine["spark.executor.extraJavaOptions"] == "-Dmine=1"
    # A workflow's shared application asks for every run's slots (3 runs of 2 ranks, 2 cores each), and its
    # session starts once the largest run's are there.
    shared = session.Shape("workflow w", slots=6, threads=2, gpu=False, first=2)
    settings = session.spark_settings(shared, section, "spark://127.0.0.1:7077", tmp_path)
    assert settings["spark.cores.max"] == "12" and settings["spark.app.name"] == "snakeddp workflow w"
    assert settings["spark.scheduler.minRegisteredResourcesRatio"] == "0.3333"


def test_the_ranks_get_the_train_jobs_variables_but_not_the_spark_section(tmp_path):
    env = {
        "SNAKEDDP_PLATFORM": "spark",
        variables.PLATFORM_SECTION: json.dumps({"conf": {"spark.authenticate.secret": "s3cr3t"}}),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PATH": "/usr/bin",
    }
    ranks = driver.rank_environment(env, "app-1", "spark://h:7077", tmp_path)
    assert ranks["SNAKEDDP_PLATFORM"] == "spark" and ranks["GLOO_SOCKET_IFNAME"] == "lo"
    assert ranks["SNAKEDDP_SPARK_APP_ID"] == "app-1" and ranks["TMPDIR"] == str(tmp_path / "tmp")
    assert variables.PLATFORM_SECTION not in ranks and "PATH" not in ranks


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
    assert "\n" not in line and "resumes from" not in line  # no checkpoint in this run yet
    # A top-k checkpoint saved whole before the disk filled, and no last.ckpt: the rerun resumes that one.
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "epoch000-val_loss0.5.ckpt").write_bytes(b"")
    tries.write_saved(tmp_path, 10, 0, "epoch000-val_loss0.5.ckpt")
    assert "the run resumes from its newest checkpoint." in driver.failure_line(args, lost)
    slots = RuntimeError(
        "[SPARK-24819]: Barrier execution mode does not allow run a barrier stage that requires more slots "
        "than the total number of slots in the cluster currently."
    )
    assert "fewer free task slots than the run's 3 ranks" in driver.failure_line(args, slots)
    assert "no rank wrote provenance.json" in driver.failure_line(args, None)


def gpu_args(tmp_path: Path, threads: int = 1) -> argparse.Namespace:
    argv = ["--num-processes=4", f"--threads={threads}", "--gpu", "--", "--run-dir", str(tmp_path)]
    return driver.parse_args(argv)[0]


def test_a_gpu_run_asks_each_executor_for_one_gpu_and_the_ranks_cores_unless_the_user_says(tmp_path):
    args, none = gpu_args(tmp_path, threads=2), Settings.of({"master": None, "conf": {}})
    settings = session.spark_settings(shape_of(args), none, "spark://h:7077", tmp_path)
    assert settings["spark.task.resource.gpu.amount"] == "1"
    assert settings["spark.executor.resource.gpu.amount"] == "1" and settings["spark.executor.cores"] == "2"
    # local[N] has no executors (TorchDistributor takes the driver's GPUs there); a CPU run asks for none.
    local = session.spark_settings(shape_of(args), none, "local[4]", tmp_path)
    assert local["spark.task.resource.gpu.amount"] == "1" and "spark.executor.resource.gpu.amount" not in local
    cpu = session.spark_settings(shape_of(args_for(tmp_path)), none, "spark://h:7077", tmp_path)
    assert not {key for key in cpu if "gpu" in key or key == "spark.executor.cores"}
    # The executors' shape is the user's once they set part of it, in spark.conf or spark-defaults.conf
    # (which Spark reads itself, and ours would override).
    theirs = Settings.of({"master": None, "conf": {"spark.executor.resource.gpu.amount": 4}})
    mine = session.spark_settings(shape_of(args), theirs, "spark://h:7077", tmp_path)
    assert mine["spark.executor.resource.gpu.amount"] == "4" and "spark.executor.cores" not in mine
    site = {"spark.executor.cores": "8", "spark.task.resource.gpu.amount": "1"}
    shaped = session.spark_settings(shape_of(args), none, "spark://h:7077", tmp_path, site)
    gpu_shape = ("spark.executor.cores", "spark.task.resource")
    assert not {key for key in shaped if key.startswith(gpu_shape)}
    # Executors sized by cores alone still ask for their GPU: without it Spark refuses every GPU task.
    assert shaped["spark.executor.resource.gpu.amount"] == "1"


# What py4j raised when the driver asked a cluster for GPU tasks without GPU executors (Spark 4.3).
NO_EXECUTOR_GPUS = (
    "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n: "
    "org.apache.spark.SparkException: No executor resource configs were specified for the following task "
    "configs: gpu\n\tat org.apache.spark.resource.ResourceProfile.calculateTasksAndLimitingResource"
    "(ResourceProfile.scala:249)\n"
)


def test_a_session_refused_for_its_resource_settings_says_so_in_sparks_words_not_the_masters():
    line = session.session_failure("spark://h:7077", "$MASTER", RuntimeError(NO_EXECUTOR_GPUS))
    assert line.startswith("Spark refused the run's resource settings") and "\n" not in line
    assert "No executor resource configs were specified for the following task configs: gpu. HINT:" in line
    assert "spark.authenticate" not in line and line.count("HINT:") == 1
    refused = RuntimeError(
        "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n: "
        "java.lang.RuntimeException: java.lang.IllegalStateException: Expected SaslMessage, received something else"
    )
    other = session.session_failure("spark://h:7077", "$MASTER", refused)
    assert "Expected SaslMessage, received something else" in other and "spark.authenticate's secret" in other


def test_too_few_slots_for_a_gpu_run_names_the_workers_gpus(tmp_path):
    slots = RuntimeError(
        "[SPARK-24819]: Barrier execution mode does not allow run a barrier stage that requires more slots"
    )
    line = driver.failure_line(gpu_args(tmp_path), slots)
    assert "fewer free task slots than the run's 4 ranks (spark.task.cpus=1 and one GPU each)" in line
    assert "spark.worker.resource.gpu.amount" in line and line.count("HINT:") == 1


def driver_hello(tmp_path: Path, env: dict[str, str], run: str, overrides: dict) -> tuple[dict, Launch]:
    """The hello a run's driver sends, from the command snakeddp.launch builds for it in a train job's
    environment, and the run's launch part."""
    run_yaml, manifest, run_dir = prepare(tmp_path / run, overrides, run_id=run)
    argv = ["--platform", "spark", "--config", str(run_yaml), "--run-dir", str(run_dir), "--data", str(manifest)]
    _, command, child_env = launch.build(launch.parse_args(argv), env)
    assert command[1:3] == ["-m", "snakeddp.spark.driver"]
    args, _ = driver.parse_args(command[3:])
    section = from_environment(child_env)
    hello = sharing.hello(section, args.num_processes, args.threads, args.gpu)
    return hello, Launch.of(RunFile.load(run_yaml).config["launch"])


def test_the_session_the_workflow_starts_ahead_is_the_one_its_runs_drivers_ask_for(tmp_path):
    """The workflow starts the shared session before any train job (sharing.expected); each run's driver
    then asks for one (sharing.hello, from the command snakeddp.launch built): they must be the same, or
    the expected session is thrown away for the first run's."""
    spark = {"master": "spark://127.0.0.1:7077", "conf": {"spark.executor.memory": "2g"}}
    env = {variables.PLATFORM: "spark", variables.PLATFORM_SECTION: json.dumps(spark)}
    sweep = {"devices-2": {"devices": 2}, "devices-3": {"devices": 3}}
    asked = [driver_hello(tmp_path, env, run, {"launch": {**launch_part, "threads_per_process": 2}})
             for run, launch_part in sweep.items()]  # fmt: skip
    expected = sharing.expected([part for _, part in asked], env)
    assert expected is not None and expected["num_processes"] == 2 and expected["threads"] == 2
    assert {sharing.session_key(hello) for hello, _ in asked} == {sharing.session_key(expected)}
    # Runs that ask for other sessions (here: other cores per rank) leave the first run to start it.
    other, part = driver_hello(tmp_path, env, "threads-1", {"launch": {"devices": 2, "threads_per_process": 1}})
    assert sharing.session_key(other) != sharing.session_key(expected)
    assert sharing.expected([asked[0][1], part], env) is None


def test_a_run_waiting_for_the_shared_applications_slots_is_queued_in_its_status_and_says_why_once(tmp_path, capsys):
    """Its status said "starting" while it waited for the other runs' slots, and its log nothing."""
    run_dir = tmp_path / "runs" / "lr-0.1"
    run_dir.mkdir(parents=True)
    status.write(run_dir, "starting", writer="launcher")
    driver.queued(run_dir, "the other runs hold 2 of its 2 task slots; this run starts once they leave it 2 slots")
    record = status.read(run_dir)
    assert record["state"] == "queued" and record["detail"].startswith("waits for Spark task slots: the other runs")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("lr-0.1: waits for its turn in the workflow's Spark application: the other runs hold 2")
