"""A consumer group member, its committed cursors, and the activity stream."""

from __future__ import annotations

import uuid

from _address import server_address

from liftbridge_sync import Client, ConsumerJoinedGroup, StartAt, StreamCreated


def main() -> None:
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    group = f"billing-{uuid.uuid4().hex[:8]}"
    with Client(server_address()) as client:
        with client.activity() as events:
            client.create_stream(subject=stream, name=stream, partitions=2)
            for i in range(4):
                client.publish(stream, f"order {i}".encode(), partition=i % 2)

            # The only member of the group: it is assigned both partitions.
            with client.consumer(
                group, streams=[stream], auto_commit=None, start=StartAt.earliest()
            ) as consumer:
                got = sorted(consumer.get(10).value.decode() for _ in range(4))
                print("consumed:", got)
                print("committed:", sorted(consumer.commit().items()))
            print("cursor of partition 1:", client.fetch_cursor(f"__group:{group}", stream, 1))

            seen = []
            while len(seen) < 2:
                event = events.get(10)
                if isinstance(event, StreamCreated) and event.stream == stream:
                    seen.append(f"created {event.stream} partitions={list(event.partitions)}")
                if isinstance(event, ConsumerJoinedGroup) and event.group_id == group:
                    seen.append(f"{event.consumer_id == consumer.consumer_id} joined")
            print("activity:", seen)


if __name__ == "__main__":
    main()
