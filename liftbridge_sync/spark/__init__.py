"""PySpark integration (extra ``spark``): a ``foreachPartition`` sink and a data source.

* :func:`publish_partition` builds a picklable function for ``df.foreachPartition`` /
  ``rdd.foreachPartition`` (also from ``foreachBatch``) that publishes every row and
  waits for every ack: at-least-once.
* :class:`LiftbridgeDataSource` is a Spark 4 Python Data Source named ``liftbridge``
  (batch and streaming read and write). It registers itself in every SparkSession
  through the top-level ``pyspark_liftbridge`` module; :func:`register` does it by hand.

Importing ``liftbridge_sync`` never imports PySpark; importing this subpackage does only
for the data source (lazily, on first attribute access).
"""

from __future__ import annotations

from liftbridge_sync.spark.sink import (
    PartitionPublisher,
    PublishSummary,
    SinkOptions,
    publish_partition,
)

__all__ = [
    "PartitionPublisher",
    "PublishSummary",
    "SinkOptions",
    "publish_partition",
]
