"""The Spark session fixture's one retry of a JVM that exited at start-up (see
``conftest._start``): the second start is made, and the pipe PySpark's launcher leaves
open to the exited JVM is closed (left to the collector, its ResourceWarning became an
error in whatever test ran next)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import PySparkRuntimeError  # noqa: E402

from tests.spark.conftest import _start  # noqa: E402


class _ExitsOnce:
    """A builder whose first start fails as PySpark's ``launch_gateway`` does when the
    JVM dies: its ``proc`` (stdin a pipe) has exited and is still referenced from the
    error's traceback."""

    def __init__(self, condition: str) -> None:
        self.condition = condition
        self.starts = 0
        self.launched: list[subprocess.Popen[bytes]] = []

    def getOrCreate(self) -> str:  # noqa: N802 - PySpark's name
        self.starts += 1
        if self.starts == 1:
            self._launch_gateway()
        return "session"

    def _launch_gateway(self) -> None:
        proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
        self.launched.append(proc)
        proc.wait(timeout=30)
        raise PySparkRuntimeError(errorClass=self.condition, messageParameters={})


def test_a_jvm_that_exited_at_start_up_is_started_once_more_and_its_pipe_closed() -> None:
    builder = _ExitsOnce("JAVA_GATEWAY_EXITED")
    assert _start(builder) == "session"
    assert builder.starts == 2
    [proc] = builder.launched
    assert proc.stdin is not None and proc.stdin.closed


def test_any_other_start_up_failure_is_raised_at_once() -> None:
    builder = _ExitsOnce("APPLICATION_NAME_NOT_SET")
    with pytest.raises(PySparkRuntimeError):
        _start(builder)
    assert builder.starts == 1
    for proc in builder.launched:  # the test's own pipe, not PySpark's
        assert proc.stdin is not None
        proc.stdin.close()
