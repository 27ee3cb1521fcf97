"""`make demo`: start a local Liftbridge, publish ten messages, read them back.

Everything is local: the server binary is installed by the harness, runs on loopback
ports with a temporary data directory, and is stopped at the end.
"""

from __future__ import annotations

from liftbridge_sync import AckPolicy, Client, StartAt, StopAt
from liftbridge_sync.testing import LiftbridgeServer

FRUIT = ["apple", "banana", "cherry", "date", "elderberry"]


def main() -> None:
    print("Starting a local Liftbridge server (first run builds it; this can take a minute)...")
    with LiftbridgeServer() as server:
        print(f"Liftbridge {server.installed.version} ready at {server.address}\n")
        with Client(server.address) as client:
            client.create_stream(subject="demo.fruit", name="fruit", partitions=1)
            print("Created stream 'fruit' on subject 'demo.fruit'.")

            for i in range(10):
                ack = client.publish(
                    "fruit",
                    f"{FRUIT[i % len(FRUIT)]} #{i}".encode(),
                    key=FRUIT[i % len(FRUIT)].encode(),
                    headers={"batch": b"demo", "seq": str(i).encode()},
                    ack_policy=AckPolicy.ALL,
                )
                assert ack is not None
            print("Published 10 messages (ack policy ALL).\n")

            print(f"{'offset':>6}  {'key':<11} {'value':<16} {'headers':<22} received")
            for msg in client.subscribe("fruit", start=StartAt.earliest(), stop=StopAt.latest()):
                headers = ", ".join(
                    f"{k}={v.decode()}"
                    for k, v in sorted(msg.headers.items())
                    if k in ("batch", "seq")
                )
                when = msg.timestamp.strftime("%H:%M:%S.%f")[:-3] if msg.timestamp else "?"
                key = msg.key.decode() if msg.key else ""
                print(f"{msg.offset:>6}  {key:<11} {msg.value.decode():<16} {headers:<22} {when}")

            client.delete_stream("fruit")
        print("\nStopping the server.")
    print("Done.")


if __name__ == "__main__":
    main()
