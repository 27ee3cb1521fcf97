"""Constants shared by the test suites (one definition each)."""

from __future__ import annotations

from liftbridge_sync import RetryPolicy

#: Retries that give a fake or restarting broker a few seconds, in small steps.
FAST_RETRY = RetryPolicy(max_attempts=20, max_delay=5.0, initial=0.01, maximum=0.05, jitter=0.0)
#: Few, quick retries: for tests that want a failure to surface soon.
SHORT_RETRY = RetryPolicy(max_attempts=5, max_delay=2.0, initial=0.01, maximum=0.05, jitter=0.0)
#: Patient retries for tests that break connections for a while (black holes, restarts).
PATIENT_RETRY = RetryPolicy(max_attempts=100, max_delay=30, initial=0.05, maximum=0.2, jitter=0)

#: grpcio channel options that reconnect within half a second of a broker coming back
#: (its default back-off grows to two minutes): for tests that restart brokers.
FAST_RECONNECT = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)
