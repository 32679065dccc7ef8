"""The admin commands' output: tables drawn by rich that a pipe receives whole (no row folded at 80
columns, a newline at the end), and ``consume`` lines that name only the tags and keys a message has."""

from __future__ import annotations

import io

from broker_store.cli.main import consumed_line
from broker_store.cli.table import print_table
from broker_store.protocol.message import StoredMessage
from broker_store.protocol.properties import PROPERTY_KEYS, PROPERTY_TAGS

LONG_GROUP = "source-a-broker-group-with-a-name-long-enough-to-pass-eighty-columns"


def test_a_table_to_a_pipe_is_never_cut_and_ends_with_a_newline() -> None:
    out = io.StringIO()
    addrs = "0=127.0.0.1:10911, 1=127.0.0.1:10913, 2=127.0.0.1:10915"
    print_table(("cluster", "broker group", "addresses"), [("source", LONG_GROUP, addrs), ("target", "t-a", None)],
                file=out)
    text = out.getvalue()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[0].split() == ["cluster", "broker", "group", "addresses"]
    assert lines[2].split(maxsplit=2) == ["source", LONG_GROUP, addrs]
    assert lines[3].split() == ["target", "t-a", "-"]  # a missing cell is '-'
    assert max(map(len, lines)) > 80


def test_numeric_columns_align_right_and_cells_are_not_markup() -> None:
    out = io.StringIO()
    print_table(("queue", "min", "max"), [("[bold]Orders@a#0", 0, 1000), ("Orders@a#1", 12, 7)],
                numeric=("min", "max"), file=out)
    lines = out.getvalue().splitlines()
    assert lines[2].startswith("[bold]Orders@a#0")
    assert lines[2].index("1000") == lines[3].index("   7") and lines[2].endswith("1000")


def stored(properties: dict[str, str]) -> StoredMessage:
    return StoredMessage(topic="Orders", queue_id=0, queue_offset=5, commit_log_offset=0, body=b"abc",
                         properties=properties, flag=0, sys_flag=0, born_timestamp=0, born_host="127.0.0.1:1",
                         store_timestamp=0, store_host="127.0.0.1:10911", reconsume_times=0, prepared_tx_offset=0,
                         body_crc=0, store_size=0)


def test_consume_names_only_the_tags_and_keys_a_message_has() -> None:
    plain = consumed_line("Orders@a#0", stored({}), show_body=False)
    assert "None" not in plain and "tags=" not in plain and "keys=" not in plain
    assert plain.startswith("Orders@a#0 offset=5 msgId=") and plain.endswith(" 3 bytes")
    tagged = consumed_line("Orders@a#0", stored({PROPERTY_TAGS: "A", PROPERTY_KEYS: "k1"}), show_body=True)
    assert " tags=A keys=k1 abc" in tagged
