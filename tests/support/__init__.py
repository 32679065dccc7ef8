"""Helpers shared by tests that start real name server and broker processes on loopback."""
