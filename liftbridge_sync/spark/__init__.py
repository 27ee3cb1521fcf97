"""PySpark integration (extra ``spark``): a ``foreachPartition`` sink and a data source.

* :func:`publish_partition` builds a picklable function for ``df.foreachPartition`` /
  ``rdd.foreachPartition`` (also from ``foreachBatch``) that publishes every row and
  waits for every ack: at-least-once (at-most-once with ``AckPolicy.NONE``).
* :class:`LiftbridgeDataSource` is a Spark 4 Python Data Source named ``liftbridge``
  (batch and streaming read and write). It registers itself in every SparkSession
  through the top-level ``pyspark_liftbridge`` module; :func:`register` does it by hand.

Importing ``liftbridge_sync`` never imports PySpark. Importing this subpackage imports
nothing more: each name loads its module on first access (the sink loads the client,
the data source PySpark), so that a Spark worker unpickling the data source for its
schema alone loads neither the client nor gRPC.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from liftbridge_sync.spark.datasource import LiftbridgeDataSource, register
    from liftbridge_sync.spark.sink import (
        PartitionPublisher,
        PublishSummary,
        SinkOptions,
        publish_partition,
    )

__all__ = [
    "LiftbridgeDataSource",
    "PartitionPublisher",
    "PublishSummary",
    "SinkOptions",
    "publish_partition",
    "register",
]


_HOMES = {
    "LiftbridgeDataSource": "datasource",
    "register": "datasource",
    "PartitionPublisher": "sink",
    "PublishSummary": "sink",
    "SinkOptions": "sink",
    "publish_partition": "sink",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
