"""PySpark integration (extra ``spark``): a ``foreachPartition`` sink and a data source.

* :func:`publish_partition` builds a picklable function for ``df.foreachPartition`` /
  ``rdd.foreachPartition`` (also from ``foreachBatch``) that publishes every row and
  waits for every ack: at-least-once (at-most-once with ``AckPolicy.NONE``).
* :class:`LiftbridgeDataSource` is a Spark 4 Python Data Source named ``liftbridge``
  (batch and streaming read and write). It registers itself in every SparkSession
  through the top-level ``pyspark_liftbridge`` module; :func:`register` does it by hand.

Importing ``liftbridge_sync`` never imports PySpark; importing this subpackage does only
for the data source (lazily, on first attribute access).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from liftbridge_sync.spark.sink import (
    PartitionPublisher,
    PublishSummary,
    SinkOptions,
    publish_partition,
)

if TYPE_CHECKING:
    from liftbridge_sync.spark.datasource import LiftbridgeDataSource, register

__all__ = [
    "LiftbridgeDataSource",
    "PartitionPublisher",
    "PublishSummary",
    "SinkOptions",
    "publish_partition",
    "register",
]


def __getattr__(name: str) -> Any:
    if name in ("LiftbridgeDataSource", "register"):
        from liftbridge_sync.spark import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
