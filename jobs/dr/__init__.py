"""Disaster recovery of a replication link: ``python -m jobs.dr``; see ``jobs.dr.__main__``."""
