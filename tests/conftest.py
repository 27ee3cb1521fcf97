"""Suite-wide fixtures: no ``liftbridge-*`` thread may outlive a test; hypothesis profile.

(A failed test that used a server which is no longer running gets that server's log
tail from the kit's pytest plugin, :mod:`liftbridge_sync.testing.plugin`.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# Property tests check behaviour, not speed: a loaded 2-core CI machine must not fail
# them on hypothesis' per-example deadline or its "too slow" health check.
settings.register_profile("liftbridge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("liftbridge")


def _liftbridge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("liftbridge-") and t.is_alive()]


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    """Fail a test that leaves a ``liftbridge-*`` thread running (1 s grace period)."""
    before = set(_liftbridge_threads())
    yield
    deadline = time.monotonic() + 1.0
    leaked = [t for t in _liftbridge_threads() if t not in before]
    while leaked and time.monotonic() < deadline:
        leaked[0].join(timeout=0.05)
        leaked = [t for t in _liftbridge_threads() if t not in before]
    assert not leaked, f"threads leaked: {[t.name for t in leaked]}"


@pytest.fixture
def raising_handler() -> Iterator[threading.Event]:
    """SIGUSR1 raises :class:`tests.signals.Interrupted` in the main thread until the event
    is set (see :func:`tests.signals.raising_sigusr1`)."""
    from tests.signals import raising_sigusr1

    with raising_sigusr1() as quiet:
        yield quiet
