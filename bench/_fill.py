"""Filling a stream fast (for the subscribe bench and the subscribe profile)."""

from __future__ import annotations

import time

from bench._ours import make_payloads

__all__ = ["fill_stream"]


def fill_stream(address: str, stream: str, messages: int, size: int, window: int) -> float:
    """Publish ``messages`` payloads with liftbridge_sync's ``publish_async`` (sliding window
    of ``window``), wait for every ack, and return the rate in msgs/s."""
    from liftbridge_sync import Client

    payloads = make_payloads(messages, size)
    with Client([address], max_in_flight=window, ack_timeout=120.0) as client:
        start = time.perf_counter()
        futures = [client.publish_async(stream, value) for value in payloads]
        client.flush()
        elapsed = time.perf_counter() - start
        failed = sum(1 for f in futures if f.exception() is not None)
    if failed:
        raise RuntimeError(f"{failed} of {messages} fill publishes failed")
    return messages / elapsed
