"""``format("liftbridge")`` resolves in a fresh Spark job run outside the project.

PySpark registers Python data sources by listing ``pyspark_*`` modules with
``pkgutil.iter_modules()``. Setuptools' editable import hook is invisible to that
listing, so the install must also put ``pyspark_liftbridge`` in a ``sys.path``
directory. The job runs in a temporary directory without ``PYTHONPATH``, so only the
installed distribution can provide the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from liftbridge_sync import Client
from tests.integration.conftest import StreamFactory
from tests.spark.conftest import ROOT, _java_missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JOB = """
import pkgutil, sys
from pyspark.sql import SparkSession

assert not any(p and "{root}" == p.rstrip("/") for p in sys.path), sys.path
found = [m.name for m in pkgutil.iter_modules() if m.name == "pyspark_liftbridge"]
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
try:
    df = spark.read.format("liftbridge").option("brokers", "{address}").load("{stream}")
    print("ROWS", sorted(bytes(r.value).decode() for r in df.collect()), found)
finally:
    spark.stop()
"""


def test_short_name_found_from_another_directory(
    liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if _java_missing():
        pytest.skip("no Java runtime (need Java 17+)")
    stream = new_stream()
    for value in (b"a", b"b", b"c"):
        liftbridge_client.publish(stream, value)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    job = JOB.format(root=ROOT, address=liftbridge_address, stream=stream)
    done = subprocess.run(
        [sys.executable, "-c", job],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ROWS ['a', 'b', 'c'] ['pyspark_liftbridge']" in done.stdout, done.stdout[-2000:]
