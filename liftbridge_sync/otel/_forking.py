"""Forking while a thread records one of the client's measurements.

The OpenTelemetry SDK's metric locks (each instrument's aggregations) are not made
anew in a forked child: one that a parent's thread held at the fork stays held there
for good, and the child's first measurement of that instrument waits for ever. A
``gunicorn --preload`` master that published once forks its workers while its
publisher thread may still be recording that publish's outcome: a worker hung on its
first publish (one test run in four on a loaded machine).

Every measurement the client records holds :data:`MEASURING`, and a fork takes it first
(``os.register_at_fork``), so none is half-way at the fork; a measurement takes
microseconds, so a fork waits that long at most. Spans are left to the SDK's span
processors (``BatchSpanProcessor`` makes its own anew in a child; a
``SimpleSpanProcessor`` exports on the ending thread, under its exporter's locks, which
a lock of the client's must not hold up), and measurements an application records
itself are its own to keep from a fork.
"""

from __future__ import annotations

import os
import threading

__all__ = ["MEASURING"]

#: Held while the client records a measurement, and by a fork.
MEASURING = threading.Lock()


def _release() -> None:
    MEASURING.release()


# In the child, the forking thread (the only one left) holds it: it releases it there.
os.register_at_fork(before=MEASURING.acquire, after_in_parent=_release, after_in_child=_release)
