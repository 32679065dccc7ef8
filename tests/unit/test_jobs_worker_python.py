"""jobs.worker_python / worker_python.sh: the local job's Python workers import pyspark from its installed
package, not from Spark's pyspark.zip; nothing changes where that does not apply."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import worker_python
from jobs.worker_python import (
    DROP_ENV,
    PYTHON_ENV,
    WRAPPER,
    bytecode_worker_environment,
    pip_spark_home,
    submitted_worker_settings,
)


def run_wrapper(pythonpath: str, drop: str) -> str:
    env = {**os.environ, "PYTHONPATH": pythonpath, DROP_ENV: drop, PYTHON_ENV: sys.executable}
    out = subprocess.run([str(WRAPPER), "-c", "import os; print(os.environ['PYTHONPATH'])"], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_wrapper_drops_exactly_the_named_entry() -> None:
    zip_entry = "/opt/spark home/python/lib/pyspark.zip"
    kept = ["/opt/spark home/python/lib/py4j-0.10.9.9-src.zip", "/work/project", "/a/*/glob"]
    assert run_wrapper(":".join([zip_entry, *kept]), zip_entry) == ":".join(kept)
    assert run_wrapper(":".join(kept), zip_entry) == ":".join(kept)


def test_pip_install_gets_the_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    spark_home = pip_spark_home()
    if spark_home is None:
        pytest.skip("pyspark is not a pip install here")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    env = bytecode_worker_environment("local[2]", launching_jvm=True)
    assert env == {"SPARK_HOME": spark_home, "PYSPARK_PYTHON": str(WRAPPER), PYTHON_ENV: sys.executable,
                   DROP_ENV: f"{spark_home}/python/lib/pyspark.zip"}
    assert Path(env[DROP_ENV]).is_file()


@pytest.mark.parametrize(("master", "launching", "python"), [
    ("spark://127.0.0.1:7077", True, None),  # executors elsewhere: their own Python and SPARK_HOME
    ("local[2]", False, None),  # spark-submit's JVM: its environment is not ours to change
    ("local[2]", True, "/usr/bin/python3"),  # the user's PYSPARK_PYTHON wins
])
def test_left_alone(monkeypatch: pytest.MonkeyPatch, master: str, launching: bool, python: str | None) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", python or sys.executable)
    assert bytecode_worker_environment(master, launching_jvm=launching) == {}


def test_spark_distribution_left_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "python" / "lib").mkdir(parents=True)
    (tmp_path / "python" / "lib" / "pyspark.zip").write_bytes(b"")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # not the pyspark this process imports
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python.pip_spark_home() is None
    assert bytecode_worker_environment("local[*]", launching_jvm=True) == {}


def test_a_spark_submitted_driver_routes_its_contexts_workers_through_the_wrapper(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spark_home = pip_spark_home()
    if spark_home is None:
        pytest.skip("pyspark is not a pip install here")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_HOME", spark_home)
    env, settings = submitted_worker_settings("local[2]")
    assert env == {"PYSPARK_PYTHON": str(WRAPPER)}
    assert settings == {f"spark.executorEnv.{PYTHON_ENV}": sys.executable,
                        f"spark.executorEnv.{DROP_ENV}": f"{spark_home}/python/lib/pyspark.zip"}
    assert submitted_worker_settings("spark://127.0.0.1:7077") == ({}, {})


def test_spark_submits_own_pyspark_zip_counts_as_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under spark-submit the driver imports pyspark from SPARK_HOME's zip (first on its PYTHONPATH)."""
    import pyspark

    spark_home = pip_spark_home()
    if spark_home is None:
        pytest.skip("pyspark is not a pip install here")
    monkeypatch.setenv("SPARK_HOME", spark_home)
    monkeypatch.setattr(pyspark, "__file__", f"{spark_home}/python/lib/pyspark.zip/pyspark/__init__.py")
    assert pip_spark_home() == spark_home
