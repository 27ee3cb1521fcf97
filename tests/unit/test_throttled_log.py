"""ThrottledWarning: the first warning logged, then at most one an interval, counting."""

from __future__ import annotations

import logging
import threading

import pytest

from liftbridge_sync._runtime.throttled_log import ThrottledWarning


def test_one_warning_an_interval_and_the_next_says_how_many_were_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    logger = logging.getLogger("liftbridge_sync.test_throttle")
    throttled = ThrottledWarning(logger, interval=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=logger.name):
        assert throttled.warning("junk at %d", 1)
        for offset in range(2, 7):
            now[0] += 10.0
            assert not throttled.warning("junk at %d", offset)
        now[0] += 10.0  # 60 s after the first
        assert throttled.warning("junk at %d", 7)
        assert not throttled.warning("junk at %d", 8)
    assert [r.getMessage() for r in caplog.records] == [
        "junk at 1",
        "junk at 7 (5 more like it held back since the last warning)",
    ]


def test_threads_sharing_one_log_it_once(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("liftbridge_sync.test_throttle")
    throttled = ThrottledWarning(logger)
    start = threading.Barrier(4)

    def warn() -> None:
        start.wait(10)
        for _ in range(100):
            throttled.warning("junk")

    threads = [threading.Thread(target=warn, name=f"liftbridge-test-{i}") for i in range(4)]
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert [r.getMessage() for r in caplog.records] == ["junk"]
