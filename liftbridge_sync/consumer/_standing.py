"""A member's standing, and what the heartbeat's answers do to it.

The heartbeat thread hands each polled assignment to :meth:`Standing.reconcile`;
a member the server dropped joins again through :meth:`Standing.rejoin`, or its
membership ends with :meth:`Standing.fail`; :meth:`Standing.wait` is
``wait_for_assignment()``'s wait for the first answer.

Thread-safe: the state is guarded by the lock shared with the consumer.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync.consumer._commits import Commits
from liftbridge_sync.consumer._mailbox import Mailbox
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._readers import Readers
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.errors import ClientClosedError, WaitTimeoutError

__all__ = ["Standing"]

_log = logging.getLogger("liftbridge_sync.consumer")


class Standing:
    """One member's id, whether it is closed or failed, and its readers kept
    in line with the heartbeat's answers.

    Attributes:
        consumer_id: The member's id (a generated one changes on a rejoin).
        closed: ``close()`` was called.
        failure: What ended the membership, if anything did.
        settled: Set once a poll's answer was applied, or on close or failure: what
            ``wait_for_assignment()`` waits for.

    Thread-safe: the attributes but ``settled`` are read and written under ``lock``
    (the consumer's).
    """

    def __init__(
        self,
        group: str,
        consumer_id: str,
        *,
        generated: bool,
        lock: threading.Lock,
        stop: threading.Event,
        mailbox: Mailbox,
        membership: Membership,
        readers: Readers,
        commits: Commits,
        counters: Counters,
    ) -> None:
        self._group = group
        self.consumer_id = consumer_id
        #: A generated id is replaced on a rejoin; one the user chose is kept.
        self._generated_id = generated
        self.closed = False
        self.failure: BaseException | None = None
        self.settled = threading.Event()
        self._lock = lock
        self._stop = stop
        self._mailbox = mailbox
        self._membership = membership
        self._readers = readers
        self._commits = commits
        self._counters = counters

    def wait(self, seconds: float | None) -> None:
        """Wait until the first poll's answer was applied (``None``: no limit).

        Raises:
            TimeoutError: if none was applied within ``seconds``.
            ClientClosedError: if the consumer was (or gets) closed.
            LiftbridgeError: what ended the membership (before an answer was applied or
                after: the assignment of a failed member is no assignment).
        """
        # In slices: a Ctrl-C the kernel gave another thread is handled within one.
        if not wait_event(self.settled, seconds):
            raise WaitTimeoutError("no assignment arrived within the timeout")
        with self._lock:
            closed, failure = self.closed, self.failure
        if closed:
            raise ClientClosedError(f"consumer {self._group} was closed")
        if failure is not None:
            raise failure

    def reconcile(self, assignments: Iterable[api_pb2.PartitionAssignment], epoch: int) -> None:
        """Apply a polled assignment (heartbeat thread); wait_for_assignment() may return."""
        if not self._readers.reconcile(assignments, epoch):
            return  # closed meanwhile
        self.settled.set()

    def fail(self, error: BaseException) -> None:
        """End the membership: the iterator and wait_for_assignment() raise ``error``.

        The readers stop, without committing, and what they delivered no longer
        counts: the server gave their partitions to others (or the group is gone), and
        the readers would otherwise read on (the server does not end a dropped member's
        streams), keep the error from ever being raised, and commit over the new
        owners' cursors."""
        with self._lock:
            self.failure = error
            readers = self._readers.drop_all(self.consumer_id)
            self._commits.clear()
        self._mailbox.fail(error)
        self.settled.set()
        for reader in readers:
            self._readers.stop(reader)

    def rejoin(self, error: BaseException) -> None:
        """The server dropped this member: stop reading, join again (heartbeat thread).

        The readers stop *without committing*: the partitions were given to other
        members, which may have moved the cursors on since, and a commit now could move
        a cursor back. The new membership resumes from the committed cursors.

        Raises:
            LiftbridgeError: if joining again failed for good (e.g. a stream is gone).
        """
        with self._lock:
            if self.closed:
                return
            old = self.consumer_id
            if self._generated_id:
                self.consumer_id = uuid.uuid4().hex
            new = self.consumer_id
            readers = self._readers.drop_all(new)
            self._commits.clear()
            self._counters.rejoins += 1
        _log.warning(
            "consumer %s: member %s was dropped by the server (%s); stopped %d partition "
            "reader(s) without committing, rejoining as %s from the committed positions",
            self._group,
            old,
            error,
            len(readers),
            new,
        )
        for reader in readers:
            self._readers.stop(reader)
        self._membership.rejoin(new, self._stop)
