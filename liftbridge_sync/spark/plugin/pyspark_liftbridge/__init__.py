"""Auto-registration hook: Spark registers ``DefaultSource`` of ``pyspark_*`` modules.

Installing liftbridge-sync with the ``spark`` extra makes ``format("liftbridge")``
work in every SparkSession without a ``spark.dataSource.register`` call. The module lives
alone in ``liftbridge_sync/spark/plugin/`` (a directory, not a package) so that an
editable install can put that directory on ``sys.path``, where PySpark's
``pkgutil.iter_modules()`` lookup sees it (see setup.py).
"""

from liftbridge_sync.spark.datasource import LiftbridgeDataSource as DefaultSource

__all__ = ["DefaultSource"]
