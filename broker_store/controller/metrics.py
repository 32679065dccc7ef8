"""What a controller exports to Prometheus (``net.metrics_http`` serves it when ``controller.metrics_port`` is
set): per broker group whether it has a live primary and its epochs, read from the state store and this
controller's live-broker table at each scrape. Series of a group are labelled ``cluster`` and ``group`` (the
broker name). docs/operations.md, "Monitoring", lists them::

    rmq_controller_up                      1 when the state store answered this scrape's read, else 0 (and no
                                           group series: a store that did not answer says nothing of the groups)
    rmq_controller_is_leader               1 when this controller led at its last campaign
    rmq_controller_group_has_primary       1 when the group has a primary and it heartbeats this controller
    rmq_controller_group_master_epoch      the group's master epoch (raised by every election)
    rmq_controller_group_sync_state_set_size  members of its SyncStateSet
    rmq_controller_group_alive_brokers     its brokers heartbeating this controller

Only the controller the brokers heartbeat (the leader) sees them alive: an alert on a group without a primary
takes the highest value over the controllers (``monitoring/alerts.yml``).
"""

from __future__ import annotations

import logging

from prometheus_client.core import GaugeMetricFamily, Metric

from broker_store.controller.service import Controller
from broker_store.controller.state_store import StateStoreError

log = logging.getLogger(__name__)

GROUP_LABELS = ("cluster", "group")


class ControllerMetrics:
    """The collector of one controller: ``collect`` is ``net.metrics_http``'s."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller

    async def collect(self) -> list[Metric]:
        controller = self._controller
        up = GaugeMetricFamily("rmq_controller_up", "1 when the state store answered this scrape")
        leader = GaugeMetricFamily("rmq_controller_is_leader", "1 when this controller led at its last campaign")
        leader.add_metric([], float(controller.leading))
        try:
            groups = await controller.groups()
        except StateStoreError as exc:
            log.warning("metrics: controller state unreadable: %s", exc)
            up.add_metric([], 0.0)
            return [up, leader]
        up.add_metric([], 1.0)
        families = {
            "has_primary": GaugeMetricFamily("rmq_controller_group_has_primary",
                                             "1 when the group has a primary heartbeating this controller",
                                             labels=GROUP_LABELS),
            "master_epoch": GaugeMetricFamily("rmq_controller_group_master_epoch", "the group's master epoch",
                                              labels=GROUP_LABELS),
            "sync_state_set": GaugeMetricFamily("rmq_controller_group_sync_state_set_size",
                                                "members of the group's SyncStateSet", labels=GROUP_LABELS),
            "alive": GaugeMetricFamily("rmq_controller_group_alive_brokers",
                                       "the group's brokers heartbeating this controller", labels=GROUP_LABELS),
        }
        for name, group in sorted(groups.items()):
            if not group.members:  # cleaned (CLEAN_BROKER_DATA): no longer a group
                continue
            labels = [group.cluster, name]
            alive = controller.live.alive(name)
            families["has_primary"].add_metric(labels, float(group.master_id is not None
                                                             and group.master_id in alive))
            families["master_epoch"].add_metric(labels, group.master_epoch)
            families["sync_state_set"].add_metric(labels, len(group.sync_state_set))
            families["alive"].add_metric(labels, len(alive))
        return [up, leader, *families.values()]
