"""Build of the one C extension (project metadata is in pyproject.toml).

``connectors.replication._forward`` is the replication connector's per-record forwarding loop in C. It is
optional: when it cannot be built (no compiler), the install goes on and ``connectors.replication.forwarding``
uses its Python path, which gives the same result, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("connectors.replication._forward", ["connectors/replication/_forward.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
