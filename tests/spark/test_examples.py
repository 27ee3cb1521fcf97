"""The Spark examples run on the shared SparkSession and print what they promise."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spark_sink_example(
    spark: Any, liftbridge_address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _load("spark_sink").run(spark, liftbridge_address)
    out = capsys.readouterr().out
    assert "published 1000 orders" in out
    counts = [
        int(line.split(": ")[1].split()[0])
        for line in out.splitlines()
        if line.startswith("partition ")
    ]
    assert len(counts) == 3 and sum(counts) == 1000
    assert "first on partition 0: key=customer-" in out


def test_spark_stream_example(
    spark: Any, liftbridge_address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _load("spark_stream").run(spark, liftbridge_address)
    out = capsys.readouterr().out
    assert "first run copied 100 messages" in out
    assert "second run copied 10 messages" in out
    assert "has 110 messages, the last: EVENT 109" in out
