"""spark-submit / ``python -m`` entry points: ``replicate`` (every link as a streaming query) and
``replay_failures`` (re-send what a link's failures table holds)."""
