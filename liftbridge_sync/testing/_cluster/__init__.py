"""A Liftbridge cluster on loopback sharing one external ``nats-server``.

* :mod:`.cluster`: :class:`LiftbridgeCluster`: starting, healing and stopping it, and
  its nodes one by one.
* :mod:`.nodes`: :class:`ClusterNode` and what each node is configured with
  (:data:`FAST_FAILOVER`).
* :mod:`.queries`: what the cluster's metadata says: brokers, partition leaders, and
  the waits for a new one.
"""

from liftbridge_sync.testing._cluster.cluster import LiftbridgeCluster
from liftbridge_sync.testing._cluster.nodes import FAST_FAILOVER, ClusterNode

__all__ = ["FAST_FAILOVER", "ClusterNode", "LiftbridgeCluster"]
