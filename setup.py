"""Build of the two C extensions (project metadata is in pyproject.toml).

``connectors.replication._forward`` is the replication connector's per-record forwarding loop in C;
``broker_store.store._record_walk`` is a replica's check of the records its HA link brings. Both are optional:
when one cannot be built (no compiler, no zlib headers), the install goes on and its Python module
(``connectors.replication.forwarding``, ``broker_store.store.record_check``) runs the same loop in Python, which
gives the same result, slower.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[
    Extension("connectors.replication._forward", ["connectors/replication/_forward.c"], optional=True,
              extra_compile_args=_FLAGS),
    Extension("broker_store.store._record_walk", ["broker_store/store/_record_walk.c"], optional=True,
              extra_compile_args=_FLAGS, libraries=["z"]),
])
