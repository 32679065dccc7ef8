#!/bin/sh
# Spark's Python workers of a local job (PYSPARK_PYTHON, set by jobs/worker_python.py): the job's Python
# with REPLICATOR_WORKER_PYTHONPATH_DROP taken out of PYTHONPATH, so pyspark is imported from its installed
# package (compiled bytecode cached) instead of the same files in Spark's pyspark.zip (compiled from source
# in every worker). See jobs/worker_python.py for why and when.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
    [ "$entry" = "$REPLICATOR_WORKER_PYTHONPATH_DROP" ] || kept=${kept:+$kept:}$entry
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
# `python -m <module>` through the job's fork server when it started one (jobs/worker_zygote.py): the worker starts
# with pyspark and the connector modules already imported.
if [ -n "$REPLICATOR_WORKER_ZYGOTE" ] && [ "$1" = "-m" ]; then
    exec "$REPLICATOR_WORKER_PYTHON" -I -S "${0%/*}/worker_zygote_client.py" "$@"
fi
exec "$REPLICATOR_WORKER_PYTHON" "$@"
