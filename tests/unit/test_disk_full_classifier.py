"""connectors.core.disk_full: which failures are a full disk, and the one console line a job prints for one.

The texts are shaped like what reaches a job's driver (seen in tests/spark/test_disk_full_job.py runs): a
Python ``OSError`` chained under a ``TableError``, delta-rs's error as ``deltalake`` raises it and as
``connectors.core.delta`` wraps it (one cause a line, coloured ``↳`` markers), Spark's checkpoint writer's
``java.io.IOException`` inside a Py4J / streaming query error.
"""

from __future__ import annotations

import errno
from pathlib import Path

from connectors.core.disk_full import DiskFull, find_disk_full
from connectors.core.errors import TableError
from jobs import job_logging

TABLE = "/data/delta/l1/current_offsets"

# deltalake's DeltaError for a parquet write that met ENOSPC (one line, no path)
DELTA_RS_ONE_LINE = ("Failed to parse parquet: External: Generic LocalFileSystem error: Unable to copy data to file: "
                     "No space left on device (os error 28)")

# A replication commit's failure as a StreamingQueryException carries it (trimmed): delta-rs's multi-line
# rendering of its error chain under our TableError, which names the table
DELTA_RS_COMMIT = f"""\
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform commit: Traceback \
(most recent call last):
  File "/x/connectors/core/delta.py", line 333, in create
    raise TableError(f"cannot create Delta table {{self.path(table)}}: {{exc}}") from exc
connectors.core.errors.TableError: cannot create Delta table {TABLE}: Generic LocalFileSystem error
          \x1b[31m\u21b3\x1b[0m Unable to copy data to file
           \x1b[31m\u21b3\x1b[0m No space left on device (os error 28)

 SQLSTATE: 38000
=== Streaming Query ===
Identifier: l1 [id = 5b5ad900-5e9b-4e32-a364-54e32d8f0d35, runId = 55625369-0ab6-4068-a584-1c09299249df]
"""

# Spark's offset log write failing, as a failed query's StreamingQueryException reads (seen, trimmed)
JAVA_CHECKPOINT = """\
java.io.IOException: No space left on device
=== Streaming Query ===
Identifier: l1 [id = d39d6012-3a0a-45e1-985e-bde8390a0d90, runId = 724806de-5498-4236-b71f-6ba2b005147a]
Current Committed Offsets: {PythonMicroBatchStreamWithTriggerAvailableNow@251d3847: {"queues": {"T/src-a/0": 13}}}
"""

# the same from a Py4J call (a query's start writing its checkpoint metadata): Py4JJavaError's text
PY4J_START = """\
An error occurred while calling o96.start.
: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\tat org.apache.hadoop.fs.RawLocalFileSystem$LocalFSFileOutputStream.write(RawLocalFileSystem.java:313)
\tat org.apache.spark.sql.execution.streaming.StreamMetadata$.write(StreamMetadata.scala:80)
"""


class JavaError(Exception):
    """Stands in for a Py4JJavaError / StreamingQueryException: only its text matters (theirs needs a JVM)."""


def test_python_oserror_anywhere_in_the_chain_with_its_file() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", f"{TABLE}/part-0.parquet")
        except OSError as exc:
            raise TableError(f"cannot append batch 3 (query q) to {TABLE}: {exc}") from exc
    except TableError as wrapped:
        found = find_disk_full(wrapped)
    assert found == DiskFull(f"cannot append batch 3 (query q) to {TABLE}: [Errno 28] No space left on device: "
                             f"'{TABLE}/part-0.parquet'", TABLE)

    bare = OSError(errno.ENOSPC, "No space left on device", "/data/ckpt/offsets/.7.tmp")
    assert find_disk_full(bare) == DiskFull(str(bare), "/data/ckpt/offsets/.7.tmp")
    context = RuntimeError("commit failed")
    context.__context__ = OSError(errno.EDQUOT, "Disk quota exceeded")  # raised while handling: also found
    assert find_disk_full(context) == DiskFull("[Errno 122] Disk quota exceeded", None)


def test_delta_rs_texts_raw_and_wrapped_by_the_table_set() -> None:
    assert find_disk_full(JavaError(DELTA_RS_ONE_LINE)) == DiskFull(DELTA_RS_ONE_LINE, None)
    # the path is two lines above the one saying "no space", in the same message; colours stripped
    assert find_disk_full(DELTA_RS_COMMIT) == DiskFull("No space left on device (os error 28)", TABLE)


def test_java_ioexception_of_spark_checkpoint_writer() -> None:
    found = DiskFull("java.io.IOException: No space left on device", None)
    assert find_disk_full(JavaError(JAVA_CHECKPOINT)) == found
    assert find_disk_full(JavaError(PY4J_START)) == found


def test_other_failures_are_not_a_full_disk() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert find_disk_full(refused) is None
    assert find_disk_full(OSError(errno.EIO, "Input/output error", "/data/x")) is None
    assert find_disk_full("batch 28 failed: 28 messages too big for space-efficient storage") is None
    assert find_disk_full("") is None
    looped = ValueError("a")
    looped.__context__ = KeyError("b")
    looped.__context__.__context__ = looped  # a chain that loops ends
    assert find_disk_full(looped) is None


def test_a_path_from_another_message_is_not_taken() -> None:
    text = "cannot read /data/other: Permission denied\nCaused by: java.io.IOException: No space left on device\n"
    assert find_disk_full(text) == DiskFull("Caused by: java.io.IOException: No space left on device", None)


def test_the_job_line_names_the_path_and_says_disk_full(tmp_path: Path) -> None:
    line = job_logging.failure_line("l1", RuntimeError(DELTA_RS_COMMIT), tmp_path)
    assert line.startswith(f"link l1 failed: disk full: no space left on device for {TABLE} "
                           f"(No space left on device (os error 28)); free space there"), line
    assert "\n" not in line and "\x1b" not in line
    # no path in the error: the job's own locations name it (here the only one, full or not)
    checkpoint = str(tmp_path / "checkpoints" / "l1")  # not created yet: its parent's file system
    assert job_logging.failure_line("l1", JavaError(JAVA_CHECKPOINT), None, [checkpoint]) == (
        f"link l1 failed: disk full: no space left on device for {checkpoint} (java.io.IOException: No space left "
        f"on device); free space there and start the job again: it resumes from its checkpoint")
    # anything else keeps its reason
    assert job_logging.failure_line("l1", "boom\nValueError: bad value\n") == "link l1 failed: bad value (ValueError)"
