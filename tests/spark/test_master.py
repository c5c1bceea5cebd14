"""Finding the Spark master and checking what the driver needs, with real files and sockets."""

import socket
import subprocess
import sys
import time

import pytest

from snakeddp.spark import master
from snakeddp.spark.master import SparkError
from tests.helpers import SRC, subprocess_env
from tests.spark.conftest import running_cluster


def test_the_master_is_named_by_the_config_then_master_then_spark_defaults(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text("# comment\nspark.master   spark://head:7077\nspark.x=1\n")
    env = {"SPARK_CONF_DIR": str(tmp_path)}
    assert master.resolve(None, env) == ("spark://head:7077", str(tmp_path / "spark-defaults.conf"))
    assert master.resolve(None, {**env, "MASTER": "local-cluster[2,1,1024]"})[0] == "local-cluster[2,1,1024]"
    assert master.resolve("spark://other:7077", {**env, "MASTER": "x"})[0] == "spark://other:7077"
    assert master.read_defaults(tmp_path / "spark-defaults.conf")["spark.x"] == "1"


def test_no_master_named_is_one_line_with_a_hint(tmp_path):
    with pytest.raises(SparkError, match=r"found no Spark master.*HINT: export SPARK_CONF_DIR"):
        master.resolve(None, {"SPARK_CONF_DIR": str(tmp_path)})


def test_a_master_that_does_not_answer_is_refused_and_one_that_does_passes():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        master.check_reachable(f"spark://127.0.0.1:{port}", "test")
    with pytest.raises(SparkError, match=f"no Spark master answers at spark://127.0.0.1:{port}.*HINT: start") as said:
        master.check_reachable(f"spark://127.0.0.1:{port}", "test")
    # The venv's python, as docs/spark.md types it: a bare python has neither pyspark nor snakeddp.
    assert "on this machine: .venv/bin/python scripts/spark_cluster.py start," in str(said.value)
    master.check_reachable("local-cluster[2,1,1024]", "test")  # Spark starts its own


def test_a_missing_jdk_names_the_package_and_a_bad_java_home_says_so(tmp_path):
    with pytest.raises(SparkError, match="HINT: install a JDK .*openjdk-17-jre-headless"):
        master.java({"PATH": str(tmp_path)})
    with pytest.raises(SparkError, match="has no bin/java"):
        master.java({"JAVA_HOME": str(tmp_path)})
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    assert master.java({"JAVA_HOME": str(tmp_path / "jdk")}) == str(java)


def test_without_pyspark_the_hint_names_tools_add():
    """In the interpreter this venv was made from, which has none of its packages (no pyspark): the
    module needs only the standard library, as the Snakefile's checks do."""
    done = subprocess.run(
        [sys._base_executable, "-c", "from snakeddp.spark import master; master.require_pyspark()"],
        env={**subprocess_env(), "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("HINT: run `tools/add.sh pyspark --stage train`."), done.stderr


# A run's own driver starting its session (snakeddp.spark.driver.alone's), its stderr the train job's log.
STARTS_A_SESSION = """
import os, sys
from pathlib import Path
from snakeddp.errors import exit_code
from snakeddp.spark import driver, session
from snakeddp.spark.settings import Settings

def start():
    scratch = Path(sys.argv[1])
    session.prepare_scratch(scratch)
    args, _ = driver.parse_args(["--num-processes=1", "--", "--run-dir", str(scratch)])
    section = Settings.of({"master": "local[1]", "conf": {"spark.executor.memory": sys.argv[2]}})
    driver.own_session(args, os.environ, section, ("local[1]", "spark.master"), scratch).stop()
    return 0

raise SystemExit(exit_code("snakeddp.spark", start))
"""


def test_a_setting_the_drivers_jvm_refuses_is_named_in_spark_s_words_and_fixed_as_hinted_starts(tmp_path):
    """The JVM exits before pyspark reaches it (JAVA_GATEWAY_EXITED), having said why on the process's stderr (a
    job's log): that is the line, not "check that the master is up". Started, the session leaves the log empty: no
    Spark banner, no log4j line, no JVM note on the incubator module Spark's launcher adds (session.JVM_NOTE: printed
    before any logging starts, it is left out by the pipe the driver's JVM writes to, which passes on the rest)."""
    log = tmp_path / "job.log"

    def start(memory: str) -> subprocess.CompletedProcess:
        with log.open("w") as stderr:
            return subprocess.run(
                [sys.executable, "-c", STARTS_A_SESSION, str(tmp_path / "scratch"), memory], stdout=subprocess.PIPE,
                stderr=stderr, env=subprocess_env(), text=True, timeout=120, check=False,
            )  # fmt: skip

    refused = start("lots")
    said = refused.stdout + log.read_text()
    (line,) = [line for line in said.splitlines() if "HINT:" in line]
    assert "the Spark driver's JVM did not start" in line and "Executor memory must be a positive number" in line
    assert "check that the master is up" not in line and line.count("HINT:") == 1, line
    # The JVM's own words reach the log through the pipe, as it wrote them.
    jvm = 'Exception in thread "main" org.apache.spark.SparkException: Executor memory must be a positive number'
    assert jvm in said.splitlines() and "incubator" not in said, said[-2000:]
    assert start("512m").returncode == 0, log.read_text()[-2000:]
    assert log.read_text() == "", log.read_text()[-2000:]


STARTS_AN_APPLICATION = """
import os, sys
from pathlib import Path
from snakeddp.errors import exit_code
from snakeddp.spark import master as masters, session
from snakeddp.spark.settings import Settings

def start():
    scratch = Path(sys.argv[1])
    session.prepare_scratch(scratch)
    master, source = masters.resolve(None, os.environ)
    shape = session.Shape("t", 1, 1, False)
    given = Settings.of({"master": None, "conf": {}})
    settings = session.spark_settings(shape, given, master, scratch, masters.cluster_defaults(os.environ))
    session.started(lambda: session.start_context(settings), scratch, master, source).stop()
    return 0

raise SystemExit(exit_code("snakeddp.spark", start))
"""


def test_a_master_that_requires_a_secret_refuses_a_driver_without_it_at_once_and_the_hint_starts(tmp_path):
    """Spark's client tries the master 3 times, 20 s apart, and then fails as "Cannot call methods on a stopped
    SparkContext"; the first refusal is the line, within seconds. Its HINT followed: the cluster's SPARK_CONF_DIR."""
    with running_cluster(workers=1, secret=True) as cluster:

        def start(**given: str) -> subprocess.CompletedProcess:
            env = {k: v for k, v in subprocess_env().items() if k not in {"MASTER", "SPARK_CONF_DIR"}}
            return subprocess.run(
                [sys.executable, "-c", STARTS_AN_APPLICATION, str(tmp_path / "scratch")],
                env={**env, **given}, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip

        began = time.monotonic()
        refused = start(MASTER=cluster.master_url)
        assert time.monotonic() - began < 30, refused.stderr[-2000:]
        (line,) = [line for line in (refused.stdout + refused.stderr).splitlines() if "HINT:" in line]
        assert line.startswith(f"snakeddp.spark: the Spark master at {cluster.master_url} (named by $MASTER) refused")
        assert "Expected SaslMessage" in line and line.count("HINT:") == 1, line
        conf_dir = line.split("HINT: ")[1].split("(export ")[1].split("=")[0]
        assert conf_dir == "SPARK_CONF_DIR", line
        # Another secret: Spark's client says only that its message was dropped.
        other = tmp_path / "other-conf"
        other.mkdir()
        defaults = (cluster.conf_dir / "spark-defaults.conf").read_text()
        (other / "spark-defaults.conf").write_text(defaults.replace(cluster.secret, "not-the-clusters"))
        began = time.monotonic()
        refused = start(SPARK_CONF_DIR=str(other))
        assert time.monotonic() - began < 30, refused.stderr[-2000:]
        (line,) = [line for line in (refused.stdout + refused.stderr).splitlines() if "HINT:" in line]
        assert f"the Spark master at {cluster.master_url} (named by " in line and "refused this driver" in line, line
        assert start(SPARK_CONF_DIR=str(cluster.conf_dir)).returncode == 0
