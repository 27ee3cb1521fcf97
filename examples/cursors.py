"""Durable consumer progress with Liftbridge cursors.

A cursor stores the last *processed* offset (Go client semantics); ``StartAt.cursor``
resumes at cursor + 1. The server must run with ``cursors.stream.partitions > 0`` (the
test harness and ``python -m liftbridge_sync.testing serve`` do).
"""

from __future__ import annotations

import uuid

from _address import server_address

from liftbridge_sync import Client, StartAt, StopAt

CURSOR = "billing-service"


def process_batch(client: Client, stream: str) -> list[str]:
    """Read everything after the cursor, then checkpoint the last processed offset."""
    seen: list[str] = []
    with client.subscribe(stream, start=StartAt.cursor(CURSOR), stop=StopAt.latest()) as sub:
        for message in sub:
            seen.append(message.value.decode())
        if seen:
            sub.checkpoint(CURSOR)
    return seen


def main() -> None:
    stream = f"invoices-{uuid.uuid4().hex[:8]}"
    with Client(server_address()) as client:
        client.create_stream(subject=stream, name=stream)
        for i in range(3):
            client.publish(stream, f"invoice {i}".encode())
        print("first run:", process_batch(client, stream))
        print("cursor now:", client.fetch_cursor(CURSOR, stream, 0))

        for i in range(3, 5):
            client.publish(stream, f"invoice {i}".encode())
        print("second run (resumes after the cursor):", process_batch(client, stream))
        client.delete_stream(stream)


if __name__ == "__main__":
    main()
