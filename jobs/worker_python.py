"""The Python that Spark's Python workers of a local job run: the job's own, importing pyspark from bytecode.

Called by ``jobs.spark_session.build_spark`` before it launches the driver JVM. Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's PYTHONPATH (PythonWorkerFactory,
PythonUtils.sparkPythonPath). Python never caches bytecode for modules imported from a zip, so every worker
process compiles the pyspark modules it imports from source, several times slower than importing them from
the installed package (``python -X importtime``). A streaming query's first batch starts about seven such
processes one after another (the source's driver-side runner, a daemon per planner module: data source
creation, read and write planning, commit; the task daemon), a large part of the time from session up to the
first replicated message (``benchmarks/replicator.py`` (d); figures in ``benchmarks/MEASUREMENTS.md``).

With a pip-installed pyspark, SPARK_HOME *is* the installed package and the zip is a copy of the same files,
so dropping the zip from the workers' PYTHONPATH changes which copy is read, not what runs. That is the only
case handled here, and only for a ``local`` master (the executors are the driver's JVM):
``worker_python.sh`` becomes PYSPARK_PYTHON and takes the zip out of PYTHONPATH before it runs the job's
interpreter, through the job's fork server when it has one (``jobs.worker_zygote``). When this process launches
the JVM, the JVM inherits the environment set here; under spark-submit (``submitted_worker_settings``) the
SparkContext this process creates passes it to the workers of its Python functions. A Spark distribution
(SPARK_HOME elsewhere), a cluster master or a PYSPARK_PYTHON of the user's keep Spark's behaviour.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

WRAPPER = Path(__file__).resolve().with_name("worker_python.sh")
PYTHON_ENV = "REPLICATOR_WORKER_PYTHON"
"""The interpreter ``worker_python.sh`` execs."""
DROP_ENV = "REPLICATOR_WORKER_PYTHONPATH_DROP"
"""The PYTHONPATH entry ``worker_python.sh`` removes (Spark's pyspark.zip)."""


def pip_spark_home() -> str | None:
    """SPARK_HOME when it is the directory of the pyspark package this process imports (a pip install, whose
    ``python/lib/pyspark.zip`` is a copy of that package) or that zip of a pip install, else None. As the JVM
    will see it: the PYTHONPATH entry Spark adds is this string + ``/python/lib/pyspark.zip``."""
    import pyspark
    from pyspark.find_spark_home import _find_spark_home

    spark_home = os.environ.get("SPARK_HOME") or _find_spark_home()
    home = Path(spark_home).resolve()
    package = Path(pyspark.__file__).resolve().parent
    zipped = home / "python" / "lib" / "pyspark.zip"
    if not zipped.is_file():
        return None
    if package == home:
        return spark_home
    # under spark-submit this process imports the zip itself (first on its PYTHONPATH): the workers' interpreter
    # must then find SPARK_HOME as its installed pyspark
    if package == zipped / "pyspark" and str(home.parent) in {str(Path(p).resolve()) for p in site.getsitepackages()}:
        return spark_home
    return None


def bytecode_worker_environment(master: str, *, launching_jvm: bool) -> dict[str, str]:
    """The environment (to set before the JVM is launched) that makes the local workers import pyspark from
    bytecode (see the module docstring), or {} when that does not apply: ``master`` not ``local...``, a JVM
    this process does not launch, a PYSPARK_PYTHON other than this interpreter, or a SPARK_HOME that is not
    the pip-installed pyspark. SPARK_HOME is set explicitly so that the JVM's PYTHONPATH entry is exactly the
    one ``worker_python.sh`` drops."""
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if not (master.startswith("local") and launching_jvm and python == sys.executable):
        return {}
    spark_home = pip_spark_home()
    if spark_home is None or not os.access(WRAPPER, os.X_OK):
        return {}
    return {"SPARK_HOME": spark_home, "PYSPARK_PYTHON": str(WRAPPER), PYTHON_ENV: python,
            DROP_ENV: f"{spark_home}/python/lib/pyspark.zip"}


def submitted_worker_settings(master: str) -> tuple[dict[str, str], dict[str, str]]:
    """The same for a local job that spark-submit started (its JVM runs before this process): the workers of the
    Python functions this process's SparkContext defines (the data sources, the tasks' functions) run the
    context's ``pythonExec`` (PYSPARK_PYTHON when the context is created) with its ``spark.executorEnv.*``
    settings as their environment, so the wrapper can still be theirs. Returns (for this process's environment,
    Spark settings), both empty where ``bytecode_worker_environment`` does not apply; the workers Spark's JVM
    starts of its own (the installed data sources' lookup) keep Spark's interpreter."""
    env = bytecode_worker_environment(master, launching_jvm=True)
    if not env:
        return {}, {}
    settings = {f"spark.executorEnv.{name}": env[name] for name in (PYTHON_ENV, DROP_ENV)}
    return {"PYSPARK_PYTHON": env["PYSPARK_PYTHON"]}, settings
