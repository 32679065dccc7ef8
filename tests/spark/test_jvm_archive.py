"""The JVM class-data archive end to end (jobs/jvm_archive.py): a driver JVM that ``build_spark`` launches is
given the archive and maps it. Builds the archive first when this machine has none (``make jvm-archive`` does
it before the suite; a minute once per installed Spark and Java)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import jvm_archive

PROJECT_ROOT = Path(__file__).resolve().parents[2]

SESSION = """
import json, logging
logging.basicConfig(level=logging.INFO)
from jobs.spark_session import build_spark
spark = build_spark("jvm-archive-test", master="local[1]")
jvm = spark.sparkContext._jvm
arguments = [str(a) for a in jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()]
print(json.dumps({"vm_info": str(jvm.System.getProperty("java.vm.info")), "arguments": arguments}))
spark.stop()
"""


@pytest.mark.skipif(jvm_archive.java_binary() is None, reason="no java (JAVA_HOME/bin/java or java on PATH)")
def test_a_launched_driver_jvm_maps_the_archive(tmp_path: Path) -> None:
    directory = jvm_archive.archive_dir()
    key, why = jvm_archive.current_key()
    assert key is not None, why
    archive = directory / f"{key.digest}.jsa"
    if not archive.exists():
        jvm_archive.build(directory)  # waits for nobody: a concurrent builder makes this return at once
    assert archive.exists(), f"no archive after a build: {sorted(p.name for p in directory.iterdir())}"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop(jvm_archive.SWITCH_ENV, None)
    done = subprocess.run([sys.executable, "-c", SESSION], cwd=tmp_path, env=env, capture_output=True,
                          timeout=300, check=False)
    out, err = done.stdout.decode(), done.stderr.decode(errors="replace")
    assert done.returncode == 0, err[-4000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert f"-XX:SharedArchiveFile={archive}" in seen["arguments"]
    # a static archive replaces the JDK's own: "sharing" means this one is mapped (a mismatch leaves none)
    assert "sharing" in seen["vm_info"], seen
    assert "class-data archive not used" not in err, err[-4000:]
