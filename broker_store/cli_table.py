"""Moved to ``broker_store.cli.table``. Kept only so that ``jobs.dr``, changed on a branch of its own, imports
unchanged until that branch is merged; then import ``broker_store.cli.table`` there and delete this module."""

from broker_store.cli.table import print_table as print_table
