"""The ``liftbridge-stats`` thread ends with ``close()``, whatever its timeout.

No server: a client with no reader takes its snapshot without a call.
"""

from __future__ import annotations

import threading

import pytest

from liftbridge_sync import Client, ClientStats


def _stats_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-stats"]


def test_close_waits_for_the_callback_in_progress_and_starts_no_other() -> None:
    calls: list[ClientStats] = []
    entered = threading.Event()

    def callback(stats: ClientStats) -> None:
        calls.append(stats)
        entered.set()
        # Slow user code, longer than the old bound of the join (rpc_timeout * 2 + 1).
        threading.Event().wait(2.0)

    client = Client(["127.0.0.1:1"], rpc_timeout=0.1, stats_callback=callback, stats_interval=0.01)
    client.stats()  # the first use starts the thread
    assert entered.wait(10)
    client.close(timeout=0)
    assert not _stats_threads()
    assert len(calls) == 1


def test_a_callback_closing_its_own_client_ends_the_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done = threading.Event()
    client: Client

    def callback(stats: ClientStats) -> None:
        client.close()  # from the stats thread itself: no join of itself
        done.set()

    client = Client(["127.0.0.1:1"], stats_callback=callback, stats_interval=0.01)
    client.stats()
    assert done.wait(10)
    for thread in _stats_threads():
        thread.join(10)
    assert not _stats_threads()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]
