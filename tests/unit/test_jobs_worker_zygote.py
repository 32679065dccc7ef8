"""jobs.worker_zygote's rules: which requests a fork serves, the child's sys.path, the status a client gets."""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs import worker_python, worker_zygote_client
from jobs.worker_zygote import STARTUP_SETTINGS, child_path, exit_status, refusal
from jobs.worker_zygote_client import socket_address

OWN = {"PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "YES", "PATH": "/bin"}


def test_a_module_run_with_the_same_startup_settings_is_served() -> None:
    argv = ["-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"]
    assert refusal(argv, {**OWN, "PATH": "/usr/bin", "SPARK_REUSE_WORKER": "1"}, OWN) is None


@pytest.mark.parametrize("argv", [["-c", "import sys"], ["-m"], ["-m", ""], ["script.py"], [], ["-u", "-m", "x"]])
def test_anything_but_python_m_module_is_refused(argv: list[str]) -> None:
    assert refusal(argv, OWN, OWN) == "not python -m <module>"


@pytest.mark.parametrize("name", STARTUP_SETTINGS)
def test_a_startup_setting_that_differs_or_is_missing_on_either_side_is_refused(name: str) -> None:
    argv = ["-m", "pyspark.worker"]
    assert refusal(argv, {**OWN, name: "other"}, OWN) == f"{name} differs"
    assert refusal(argv, OWN, {**OWN, name: "other"}) == f"{name} differs"


def test_the_childs_path_is_its_directory_then_its_pythonpath_then_the_interpreters_own() -> None:
    base = ["/py/lib/python311.zip", "/py/lib/python3.11", "/venv/site-packages", "/work/project"]
    assert child_path("/job", "/work/project:/spark/py4j.zip::", base) == [
        "/job", "/work/project", "/spark/py4j.zip", "/py/lib/python311.zip", "/py/lib/python3.11",
        "/venv/site-packages"]


@given(st.lists(st.text(alphabet="/abc", max_size=4), max_size=5),
       st.lists(st.text(alphabet="/abc", min_size=1, max_size=4), max_size=5))
def test_the_childs_path_is_the_pythonpath_as_given_then_the_base_entries_not_already_there(
        pythonpath: list[str], base: list[str]) -> None:
    path = child_path("/cwd", os.pathsep.join(pythonpath), base)
    head = ["/cwd", *(entry for entry in pythonpath if entry)]
    assert path[:len(head)] == head
    assert path[len(head):] == [entry for entry in base if entry not in head]


def test_a_status_is_the_exit_code_or_minus_the_signal() -> None:
    assert exit_status(3 << 8) == 3
    assert exit_status(0) == 0
    assert exit_status(signal.SIGTERM) == -signal.SIGTERM
    assert exit_status(signal.SIGKILL | 0x80) == -signal.SIGKILL  # with a core dump


def test_an_at_name_is_an_abstract_socket() -> None:
    assert socket_address("@rmq-worker-zygote-1-ab") == "\0rmq-worker-zygote-1-ab"
    assert socket_address("/run/zygote.sock") == "/run/zygote.sock"


def test_the_client_names_the_wrappers_interpreter_variable_as_its_owner_does() -> None:
    """The client runs without the project on its path (``python -I -S``), so it spells the name itself."""
    assert worker_zygote_client.PYTHON_ENV == worker_python.PYTHON_ENV
