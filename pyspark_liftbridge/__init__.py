"""Auto-registration hook: Spark registers ``DefaultSource`` of ``pyspark_*`` modules.

Installing liftbridge-sync with the ``spark`` extra makes ``format("liftbridge")``
work in every SparkSession without a ``spark.dataSource.register`` call.
"""

from liftbridge_sync.spark.datasource import LiftbridgeDataSource as DefaultSource

__all__ = ["DefaultSource"]
