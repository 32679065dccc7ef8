"""Helpers shared by tests: real name server and broker processes on loopback, waiting, store hooks."""
