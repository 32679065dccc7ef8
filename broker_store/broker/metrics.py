"""What a broker exports to Prometheus (``net.metrics_http`` serves it when ``metrics_port`` is set): its role and
epoch, its CommitLog's offsets, and its store's disk: how full the file system is and whether sends are refused
for lack of space. Read at each scrape on the broker's event loop; every series is labelled ``cluster``, ``group``
(the broker name) and ``broker`` (its advertised address). docs/operations.md, "Monitoring", lists them::

    rmq_broker_is_primary            1 while the unfenced primary of its group (takes writes), else 0
    rmq_broker_role{stage=...}       1 for the role stage in force (primary, replica, promoting, demoting)
    rmq_broker_master_epoch          the master epoch in force (controller mode; 0 in static groups)
    rmq_broker_commit_log_max_offset the CommitLog's max (write) offset, bytes
    rmq_broker_commit_log_min_offset its min offset (older segments deleted by retention)
    rmq_broker_confirm_offset        the confirm offset (what replicas acknowledged; the max offset when alone)
    rmq_broker_disk_used_ratio       store_dir's file system in use, as df counts it: used / (used + available)
    rmq_broker_disk_full             1 while puts are refused for lack of space (store.disk_space)
    rmq_broker_disk_full_refused_sends sends refused in the current disk-full spell (0 outside one)
    rmq_broker_store_writable        0 once a write failed for another reason: the store is read-only
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from broker_store.broker.role import RoleStage, RoleState
from broker_store.store import MessageStore

LABELS = ("cluster", "group", "broker")


def disk_used_ratio(path: Path) -> float | None:
    """The share of ``path``'s file system in use as df shows it (space reserved for root counts as unavailable);
    None when it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    available = st.f_bavail * st.f_frsize
    return used / (used + available) if used + available > 0 else None


class BrokerMetrics:
    """The collector of one broker: ``collect`` is ``net.metrics_http``'s. ``store`` gives the started store, or
    None before it is open (then only the role is exported); ``address`` gives the advertised address."""

    def __init__(self, cluster: str, group: str, address: Callable[[], str], role_state: RoleState,
                 store: Callable[[], MessageStore | None], store_dir: Path) -> None:
        self._cluster = cluster
        self._group = group
        self._address = address
        self._role_state = role_state
        self._store = store
        self._store_dir = store_dir

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=LABELS)
        family.add_metric([self._cluster, self._group, self._address()], value)
        return family

    async def collect(self) -> list[Metric]:
        role = self._role_state
        stages = GaugeMetricFamily("rmq_broker_role", "1 for the role stage in force", labels=[*LABELS, "stage"])
        for stage in RoleStage:
            stages.add_metric([self._cluster, self._group, self._address(), stage.value.lower()],
                              1.0 if role.stage is stage else 0.0)
        out: list[Metric] = [
            self._gauge("rmq_broker_is_primary", "1 while the unfenced primary of its group", float(role.is_primary)),
            stages,
            self._gauge("rmq_broker_master_epoch", "the master epoch in force (0 in static groups)", role.epoch),
        ]
        store = self._store()
        if store is None:
            return out
        out += [
            self._gauge("rmq_broker_commit_log_max_offset", "CommitLog max offset, bytes", store.max_physical_offset),
            self._gauge("rmq_broker_commit_log_min_offset", "CommitLog min offset, bytes", store.min_physical_offset),
            self._gauge("rmq_broker_confirm_offset", "confirm offset, bytes", store.confirm_offset),
            self._gauge("rmq_broker_disk_full", "1 while puts are refused for lack of space", float(store.disk_full)),
            self._gauge("rmq_broker_disk_full_refused_sends", "sends refused in the current disk-full spell",
                        store.disk_full_refused),
            self._gauge("rmq_broker_store_writable", "0 once the store turned read-only", float(store.writable)),
        ]
        ratio = disk_used_ratio(self._store_dir)
        if ratio is not None:
            out.append(self._gauge("rmq_broker_disk_used_ratio", "store_dir's file system in use, as df counts it",
                                   ratio))
        return out
