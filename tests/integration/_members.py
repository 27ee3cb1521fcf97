"""Consumer-group members read on their own threads, and what an undelivered message
tells when they missed some.

Shared by the cluster tests of consumer groups (``test_consumer_groups_cluster.py``,
``test_rolling_restart.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from liftbridge_sync import Ack, Client
from liftbridge_sync.consumer import Consumer

from ._rewrites import Where, log_of, overwritten_after_ack, reread_after_rewrite

__all__ = ["Reader", "undelivered_report"]


class Reader:
    """Iterates a consumer on its own thread; records values and what ended it."""

    def __init__(self, consumer: Consumer) -> None:
        self.values: set[bytes] = set()
        #: Where each value was read: (partition, offset).
        self.where: dict[bytes, Where] = {}
        #: Each (partition, offset) read, in the order read (a re-delivery twice).
        self.positions: list[Where] = []
        #: The longest ``get(0.2)`` call, seconds.
        self.longest_get = 0.0
        self.errors: list[BaseException] = []
        self.ended = False
        self._consumer = consumer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lbtest-member", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                msg = self._consumer.get(0.2)
            except TimeoutError:
                continue
            except StopIteration:
                self.ended = True
                return
            except BaseException as exc:
                self.errors.append(exc)
                return
            finally:
                self.longest_get = max(self.longest_get, time.monotonic() - began)
            self.where[msg.value] = (msg.partition, msg.offset)
            self.positions.append((msg.partition, msg.offset))
            self.values.add(msg.value)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive()


def undelivered_report(
    client: Client,
    stream: str,
    partitions: int,
    missing: set[bytes],
    acks: Mapping[bytes, Ack | None],
    readers: Sequence[Reader],
    members: Sequence[Consumer],
) -> tuple[str, bool]:
    """Where the acknowledged but undelivered values are in the log, the members' state,
    and whether the server's rewriting of its log explains every one of them.

    Tells a message the cluster lost (not in the log) from one the consumers did not
    read (in the log, at an offset the report gives), and either from the work of a
    log that v1.9.0 rewrote (see ``_rewrites``).

    Args:
        client: A client of the cluster, to read the log with.
        stream: The group's stream.
        partitions: Its number of partitions.
        missing: The acknowledged values no member delivered.
        acks: The ack of each acknowledged value.
        readers: The members' readers.
        members: The members.
    """
    log = log_of(client, stream, partitions)
    found = {msg.value: where for where, msg in log.items() if msg.value in missing}
    delivered_at = {where: value for r in readers for value, where in r.where.items()}
    lines = []
    explained = True
    for value in sorted(missing):
        if value in found:
            proof = reread_after_rewrite(found[value], value, delivered_at)
            where = f"partition {found[value][0]} offset {found[value][1]}"
        else:
            ack = acks.get(value)
            proof = None if ack is None else overwritten_after_ack(ack, log)
            where = f"NOT IN THE LOG (ack {ack})"
        explained = explained and proof is not None
        lines.append(f"{value!r}: {where}" + (f", rewritten: {proof}" if proof else ""))
    for m in members:
        lines.append(
            f"member {m.consumer_id}: epoch {m.epoch} assignment {sorted(m.assignment())} "
            f"read {m.read_positions()} committed {m.committed()} stats {m.stats()}"
        )
    return "; ".join(lines), explained
