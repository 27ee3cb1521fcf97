"""Messages for unit tests, as a subscription would deliver them."""

from __future__ import annotations

from collections.abc import Mapping

from liftbridge_sync.models import Message


def make_message(
    offset: int,
    value: bytes = b"",
    *,
    key: bytes | None = None,
    partition: int = 0,
    stream: str = "s",
    subject: str | None = None,
    headers: Mapping[str, bytes] | None = None,
    timestamp_ns: int = 0,
) -> Message:
    """A message of ``stream`` (subject: ``stream``, or ``stream.partition`` past 0)."""
    if subject is None:
        subject = stream if partition == 0 else f"{stream}.{partition}"
    return Message(
        offset=offset,
        key=key,
        value=value,
        partition=partition,
        stream=stream,
        subject=subject,
        reply_subject="",
        headers=headers or {},
        timestamp_ns=timestamp_ns,
    )
