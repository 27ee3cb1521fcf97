"""Subscriptions: a blocking iterator, a timeout-bounded get(), and whole-stream reads."""

from __future__ import annotations

import uuid

from _address import server_address

from liftbridge_sync import Client, StartAt, StopAt


def main() -> None:
    stream = f"events-{uuid.uuid4().hex[:8]}"
    with Client(server_address()) as client:
        client.create_stream(subject=stream, name=stream, partitions=2)
        for i in range(6):
            client.publish(stream, f"event {i}".encode(), partition=i % 2)

        # One partition, from the beginning up to what exists now: a finite iterator.
        with client.subscribe(
            stream, partition=0, start=StartAt.earliest(), stop=StopAt.latest()
        ) as sub:
            print("partition 0:", [m.value.decode() for m in sub])

        # Every partition merged; order is kept within each partition.
        with client.subscribe_stream(
            stream, start=StartAt.earliest(), stop=StopAt.latest()
        ) as everything:
            for message in everything:
                print(f"  p{message.partition}@{message.offset}: {message.value.decode()}")

        # Live tail with a timeout: get() raises TimeoutError when nothing arrives.
        with client.subscribe(stream, partition=1, start=StartAt.latest()) as tail:
            print("latest on partition 1:", tail.get(timeout=5).value.decode())
            try:
                tail.get(timeout=0.5)
            except TimeoutError:
                print("no new messages within 0.5 s")

        client.delete_stream(stream)


if __name__ == "__main__":
    main()
