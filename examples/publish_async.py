"""Pipelined publishing with futures, keys spread over partitions, and flush().

``publish_async`` returns a ``concurrent.futures.Future`` that resolves with the Ack;
thousands can be in flight on one client. ``flush`` waits for all of them.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future

from _address import server_address

from liftbridge_sync import Ack, ByKey, Client, LiftbridgeError


def main() -> None:
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    with Client(server_address()) as client:
        client.create_stream(subject=stream, name=stream, partitions=4)

        futures: list[Future[Ack | None]] = []
        for i in range(1000):
            customer = f"customer-{i % 25}".encode()
            futures.append(
                client.publish_async(
                    stream,
                    f"order {i}".encode(),
                    key=customer,  # same customer -> same partition, in order
                    partitioner=ByKey(),
                    headers={"source": b"example"},
                )
            )
        client.flush(timeout=30)

        per_partition: dict[int, int] = {}
        for future in futures:
            try:
                ack = future.result()
            except LiftbridgeError as exc:  # typed: AckTimeoutError, NoSuchPartitionError, ...
                print(f"failed: {exc!r}")
                continue
            assert ack is not None
            per_partition[ack.partition] = per_partition.get(ack.partition, 0) + 1
        print(
            f"acked {sum(per_partition.values())} messages: {dict(sorted(per_partition.items()))}"
        )
        client.delete_stream(stream)


if __name__ == "__main__":
    main()
