"""One local SparkSession for every Spark test, plus stream helpers.

Spark tests need PySpark (extra ``spark``) and Java 17+; they are skipped cleanly
without them. The session runs ``local[2,2]`` so that a failed task is retried once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import Client, NoSuchStreamError
from tests.integration.conftest import StreamFactory, unique

__all__ = ["StreamFactory", "new_stream", "spark"]

ROOT = Path(__file__).resolve().parents[2]


def _java_missing() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return False
    return shutil.which("java") is None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared SparkSession (``local[2,2]``, UI off, UTC, loopback only)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if _java_missing():
        pytest.skip("no Java runtime (need Java 17+)")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    tmp = Path(tempfile.mkdtemp(prefix="lb-spark-"))
    # Spark's Python workers unpickle functions from tests.spark: they need ``tests``
    # importable, but not the checkout's ``liftbridge_sync``, which would shadow the
    # installed wheel that `make test` tests. A directory holding only ``tests`` does.
    shim = tmp / "pythonpath"
    shim.mkdir()
    (shim / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    paths = [str(shim), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    builder = (
        SparkSession.builder.master("local[2,2]")
        .appName("liftbridge-sync-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        # Generous on a loaded 2-core machine: Python workers connect back to the JVM.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.local.dir", str(tmp / "local"))
    )
    session = _start(builder)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _start(builder: Any) -> Any:
    """``builder.getOrCreate()``, started once more if the JVM exits before it reports
    its port (JAVA_GATEWAY_EXITED, seen once in CI). PySpark starts the JVM with
    ``Popen(preexec_fn=...)``; with gRPC channels active in the process, grpcio 1.80+
    can kill that child between fork and exec (grpc/grpc#43055, open: its poller hits
    "epoll_wait error: Bad file descriptor", the line CI printed). A second such exit
    fails the session."""
    from pyspark.errors import PySparkRuntimeError

    try:
        return builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        _close_exited_gateway(exc)
    logging.getLogger(__name__).warning("the Spark JVM exited at start-up; once more")
    return builder.getOrCreate()


def _close_exited_gateway(exc: BaseException) -> None:
    """Close the stdin pipe that PySpark's ``launch_gateway`` leaves open to the JVM that
    exited (its local ``proc``) and reap it. Left to the garbage collector, the pipe's
    ResourceWarning surfaced in CI as an error at whatever line ran next ("unclosed
    file <_io.BufferedWriter>", during the second start)."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        proc = frame.f_locals.get("proc")
        if isinstance(proc, subprocess.Popen):
            if proc.stdin is not None:
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


@pytest.fixture
def new_stream(liftbridge_client: Client) -> Iterator[StreamFactory]:
    """Create streams (subject = name) for one test and delete them afterwards."""
    created: list[str] = []

    def make(partitions: int = 1, **options: object) -> str:
        name = unique("spark")
        liftbridge_client.create_stream(name, name, partitions=partitions, **options)  # type: ignore[arg-type]
        created.append(name)
        return name

    yield make
    if not liftbridge_client.closed:
        for name in created:
            try:
                liftbridge_client.delete_stream(name)
            except NoSuchStreamError:
                pass
