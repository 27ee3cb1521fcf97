"""Create a stream, publish a message, read it back.

Run against a local server: ``python -m liftbridge_sync.testing serve --port 9292`` in
one terminal, then ``python examples/quickstart.py``.
"""

from __future__ import annotations

import uuid

from _address import server_address

from liftbridge_sync import Client, StartAt, StopAt


def main() -> None:
    stream = f"quickstart-{uuid.uuid4().hex[:8]}"
    with Client(server_address()) as client:
        client.create_stream(subject=stream, name=stream, exist_ok=True)
        ack = client.publish(stream, b"hello, liftbridge", key=b"greeting")
        print(f"published at offset {ack.offset}")  # type: ignore[union-attr]

        with client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
            for message in sub:
                print(f"read offset={message.offset} key={message.key!r} value={message.value!r}")

        client.delete_stream(stream)


if __name__ == "__main__":
    main()
