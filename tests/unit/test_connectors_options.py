"""Spark options and link YAML share one pydantic definition per setting (connectors.core.options)."""

from __future__ import annotations

import pytest

from connectors.core.config import LinkConfig, ReadSettings, WriteSettings
from connectors.core.errors import ReplicatorConfigError
from connectors.core.options import given_options, lowered, option_name
from connectors.replication.reader_options import SourceOptions
from connectors.replication.writer_options import SinkOptions

BASE_SOURCE = {"namesrv": "127.0.0.1:9876", "cluster": "c", "topics": "T"}
BASE_SINK = {"namesrv": "127.0.0.1:9876", "targetCluster": "t"}


def test_link_settings_and_options_are_the_same_fields() -> None:
    for settings, options in ((ReadSettings, SourceOptions), (WriteSettings, SinkOptions)):
        for name, field in settings.model_fields.items():
            assert LinkConfig.model_fields[name].metadata == field.metadata
            assert options.model_fields[name].metadata == field.metadata
            assert options.model_fields[name].default == field.default
    assert option_name(SinkOptions, "retry_timeout_ms") == "retryTimeoutMs"
    assert option_name(SourceOptions, "tag_filter") == "tags"


def test_options_are_case_insensitive_and_coerced() -> None:
    sink = SinkOptions.from_options({**BASE_SINK, "MAXRETRIES": "7", "preserveQueues": "false",
                                     "failurePolicy": " DISMISS "})
    assert (sink.max_retries, sink.preserve_queues, sink.failure_policy.value) == (7, False, "dismiss")
    source = SourceOptions.from_options({**BASE_SOURCE, "rowFormat": "RANGES", "tags": "a||b"})
    assert (source.row_format, source.pull_batch_size, source.tag_filter) == ("ranges", 1024, "a || b")
    assert given_options(SinkOptions, lowered({"unknownOption": "1", "maxInFlight": "2"})) == {"max_in_flight": "2"}


@pytest.mark.parametrize(("options", "field"), [
    ({**BASE_SINK, "maxInFlight": "0"}, "maxInFlight"),           # the YAML's bound (gt=0), same message
    ({**BASE_SINK, "retryBackoffMs": "soon"}, "retryBackoffMs"),
    ({**BASE_SINK, "failurePolicy": "ignore"}, "failurePolicy"),
    ({**BASE_SINK, "autoCreateTopic": "maybe"}, "autoCreateTopic"),
    ({"targetCluster": "t"}, "namesrv"),
])
def test_bad_sink_options_name_the_option(options: dict[str, str], field: str) -> None:
    with pytest.raises(ReplicatorConfigError) as err:
        SinkOptions.from_options(options)
    assert err.value.field == field


def test_bad_source_options_name_the_option() -> None:
    for options, field in (({**BASE_SOURCE, "tags": "a*"}, "tags"), ({**BASE_SOURCE, "rowFormat": "csv"}, "rowFormat"),
                           ({**BASE_SOURCE, "pullTimeoutMs": "-1"}, "pullTimeoutMs")):
        with pytest.raises(ReplicatorConfigError) as err:
            SourceOptions.from_options(options)
        assert err.value.field == field
