"""A replication link's Delta tables (``connectors.replication.tables.LinkTables``) as the history and retention
unit tests build them: in a temp dir, maintenance run by hand (no background thread), time on a manual
millisecond clock the test moves. One owner of that fixture for ``test_connectors_history`` and
``test_connectors_retention_failures``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker_store.client import MessageQueue
from connectors.core.history_settings import HistorySettings
from connectors.replication.tables import LinkTables
from tests.support.clocks import MillisClock

DAY_MS = 86_400_000
START_MS = 1_700_000_000_000


def link(tmp_path: Path, clock: MillisClock, floors: dict[MessageQueue, int] | None = None,
         **settings: Any) -> LinkTables:
    """The link ``l`` of source cluster ``src`` under ``tmp_path``, with an hourly maintenance interval and the
    ``history:`` ``settings``; ``floors`` is what the offset map's fold may not pass (None: no floors read)."""
    history = HistorySettings(maintenance_interval=3600, **settings)
    return LinkTables(tmp_path / "l", source_cluster="src", clock=clock, history=history,
                      map_floors=lambda: floors, background_maintenance=False)


def round_now(t: LinkTables) -> None:
    """One maintenance round at the clock's now; fails on any table's error."""
    assert t.maintenance is not None
    for done in t.maintenance.run_round(t.now_ms()):
        assert not done.errors, done
