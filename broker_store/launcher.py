"""Moved to ``broker_store.deploy.launcher``. Kept only so that ``benchmarks/replicator.py`` (being split on a
branch of its own) imports unchanged until that branch is merged; then import ``broker_store.deploy.launcher``
there and delete this module."""

from broker_store.deploy.launcher import *  # noqa: F403
