"""The loop side of the NATS publisher: everything that runs on ``liftbridge-nats``.

nats-py is asyncio-only. The publisher's caller side (:mod:`.publisher`) hands jobs to
the writer task defined here; acks, ack timeouts (a timer wheel driven by one loop timer),
error mapping and the shutdown all run on the loop thread. Not thread-safe by itself:
only the ``liftbridge-nats`` thread calls these methods (shared state is guarded by the
publisher's lock).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import itertools
import logging
import math
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

from liftbridge_sync._runtime.throttled_log import ThrottledWarning
from liftbridge_sync._runtime.timerwheel import TimerWheel
from liftbridge_sync._wire.status import (
    error_from_ack_error,
)
from liftbridge_sync._wire.validate import SUBJECT_MAX_BYTES
from liftbridge_sync.envelope import unmarshal_ack
from liftbridge_sync.errors import (
    AckTimeoutError,
    BrokerUnavailableError,
    ClientClosedError,
    EnvelopeError,
    LiftbridgeError,
    PublishError,
    PublishRejectedError,
)

if TYPE_CHECKING:
    from nats.aio.client import Client as _NatsClient
    from nats.aio.msg import Msg as _NatsMsg

__all__ = ["LoopSide"]


from liftbridge_sync.nats._support import Job, settle

_log = logging.getLogger("liftbridge_sync.nats")

#: At least a PUB command's bytes besides its payload (verb, subject, reply, size, CRLFs).
_PUB_OVERHEAD = 64 + 2 * SUBJECT_MAX_BYTES
#: Seconds closing the NATS connection may take even when close()'s timeout is used up.
_CLOSE_GRACE = 0.5


def _abort(nc: _NatsClient) -> None:
    """Cut ``nc``'s connection without writing what it still holds.

    nats-py has no way to: its close writes its buffer out first. Its TCP (and TLS)
    transport keeps the asyncio stream writer as ``_io_writer``; another transport is
    left to the event loop's end.
    """
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    transport = getattr(writer, "transport", None)
    if transport is not None:
        transport.abort()


class LoopSide:
    """Loop-thread half of :class:`~liftbridge_sync.nats.NatsPublisher` (a mixin)."""

    # Declared by the publisher's __init__.
    _nats: ModuleType
    _servers: list[str]
    _connect_timeout: float
    _nats_options: dict[str, Any]
    _ack_inbox: str
    _lock: threading.Lock
    _closed: bool
    _queue: collections.deque[Job]
    _wake_pending: bool
    _pending: dict[str, Job]
    _outstanding: set[concurrent.futures.Future[Any]]
    _nc: _NatsClient | None
    _wake: asyncio.Event | None
    _writer: asyncio.Task[None] | None
    _stopping: bool
    _wheel: TimerWheel[Job]
    _timer: asyncio.TimerHandle | None
    _timer_at: float
    _tasks: set[asyncio.Task[Any]]
    _pending_limit: float
    _bad_acks: ThrottledWarning

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self) -> None:
        """Connect, subscribe to the ack inbox and start the writer (loop thread)."""
        nc = self._nats.aio.client.Client()
        # nats-py gives up after 60 reconnect attempts and closes the connection for good:
        # the publisher would fail every publish after a NATS outage of two minutes.
        options = {"max_reconnect_attempts": -1, **self._nats_options}
        try:
            await asyncio.wait_for(
                nc.connect(
                    servers=self._servers,
                    connect_timeout=self._connect_timeout,
                    **options,
                ),
                timeout=self._connect_timeout,
            )
            await nc.subscribe(self._ack_inbox, cb=self._on_ack_msg)
            # The SUB must reach the server before the first publish asks for an ack.
            await nc.flush(timeout=self._connect_timeout)
        except BaseException:
            try:
                await nc.close()
            except Exception:  # pragma: no cover - best effort cleanup
                _log.debug("closing a failed NATS connection", exc_info=True)
            raise
        self._nc = nc
        self._wake = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def _wake_writer(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _write_loop(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            await wake.wait()
            wake.clear()
            while True:
                with self._lock:
                    if not self._queue:
                        self._wake_pending = False
                        break
                    batch = list(self._queue)
                    self._queue.clear()
                await self._write(batch)
            if self._stopping:
                return

    async def _write(self, batch: list[Job]) -> None:
        nc = self._nc
        assert nc is not None
        flushed: list[Job] = []
        scheduled = False
        for index, job in enumerate(batch):
            if job.future.done():
                # Cancelled, or failed by a blocked publish() giving up: not written.
                self._forget(job)
                continue
            if job.kind == "flush":
                self._spawn(self._flush_marker(job))
                continue
            if job.kind == "ack":
                job.handle = self._wheel.schedule(job.deadline, job)
                scheduled = True
            try:
                await self._publish(nc, job, batch, index + 1)
            except Exception as exc:
                self._forget(job)
                settle(job.future, error=self._map_nats_error(exc))
                continue
            if job.kind == "raw":
                settle(job.future)
            elif job.kind == "none":
                flushed.append(job)
        if scheduled:
            self._arm_timer()
        if flushed:
            self._spawn(self._resolve_when_flushed(flushed))

    async def _publish(self, nc: _NatsClient, job: Job, batch: list[Job], rest: int) -> None:
        """Hand ``job``'s message to nats-py, bounded by the job's deadline if it may wait.

        nats-py suspends a publish only when its buffer would exceed ``pending_size``: it
        then waits for a forced flush, with no timeout by default. Only then is the loop
        timer armed (ack deadlines must fire while the writer waits) and the wait bounded
        (jobs queued behind must not stall past it); the common path stays timer-free. A
        client that does not tell its buffered size always takes the bounded path.

        While it waits, the jobs not yet written (``batch[rest:]`` and the queue) fail at
        their own deadlines, which may be earlier than ``job``'s.
        """
        limit = self._pending_limit
        buffered = getattr(nc, "pending_data_size", None)
        if limit <= 0 or (
            isinstance(buffered, int) and buffered + len(job.payload) + _PUB_OVERHEAD <= limit
        ):
            await nc.publish(job.subject, job.payload, reply=job.reply)
            return
        self._arm_timer()
        wake = self._wake
        assert wake is not None
        send = asyncio.ensure_future(nc.publish(job.subject, job.payload, reply=job.reply))
        try:
            while True:
                now = time.monotonic()
                if now >= job.deadline:
                    raise TimeoutError
                until = min(job.deadline, self._expire_unwritten(batch, rest, now))
                with self._lock:
                    # A job queued from now on wakes this wait: its deadline may come first.
                    self._wake_pending = False
                wake.clear()
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait(
                        {send, woken}, timeout=until - now, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    woken.cancel()
                if send.done():
                    send.result()
                    return
        finally:
            send.cancel()  # no-op once done; the message stays in nats-py's buffer anyway

    def _expire_unwritten(self, batch: list[Job], rest: int, now: float) -> float:
        """Fail the jobs not yet written whose deadline has passed; the next deadline.

        Jobs that will not be written (failed or cancelled, their slot free again) leave
        the queue now rather than when the held writer gets to them: the queue stays
        within ``max_in_flight`` live jobs, plus those cancelled since the last look.
        """
        with self._lock:
            queued = list(self._queue)
        upcoming = math.inf
        for job in itertools.chain(itertools.islice(batch, rest, None), queued):
            if not job.future.done():
                if job.kind == "flush":
                    continue  # its deadline is its NATS flush's timeout, not a time
                if job.deadline > now:
                    upcoming = min(upcoming, job.deadline)
                    continue
                settle(job.future, error=self._timed_out(job))
            self._forget(job)
        with self._lock:
            live = [job for job in self._queue if not job.future.done()]
            if len(live) < len(self._queue):
                self._queue.clear()
                self._queue.extend(live)
        return upcoming

    def _forget(self, job: Job) -> None:
        if job.kind == "ack":
            with self._lock:
                if self._pending.get(job.correlation_id) is job:
                    del self._pending[job.correlation_id]
        if job.handle is not None:
            self._wheel.cancel(job.handle)

    async def _resolve_when_flushed(self, jobs: list[Job]) -> None:
        """AckPolicy.NONE: resolve once a PING/PONG shows NATS has the messages."""
        nc = self._nc
        assert nc is not None
        wait = max(job.deadline for job in jobs) - time.monotonic()
        try:
            await nc.flush(timeout=max(wait, 0.001))  # type: ignore[arg-type]
        except Exception as exc:
            error = self._map_nats_error(exc)
            for job in jobs:
                settle(job.future, error=error)
        else:
            for job in jobs:
                settle(job.future)

    async def _flush_marker(self, job: Job) -> None:
        nc = self._nc
        assert nc is not None
        try:
            await nc.flush(timeout=job.deadline)  # type: ignore[arg-type]
        except Exception as exc:
            settle(job.future, error=self._map_nats_error(exc))
        else:
            settle(job.future)

    async def _on_ack_msg(self, msg: _NatsMsg) -> None:
        try:
            ack = unmarshal_ack(msg.data)
        except EnvelopeError as exc:
            self._bad_acks.warning("ignoring undecodable ack on %s: %s", msg.subject, exc)
            return
        with self._lock:
            job = self._pending.get(ack.correlation_id)
            # A job gets its wheel entry just before it is written: an ack for a job not
            # yet written is a late or duplicate one for an earlier publish with its id.
            if job is not None and job.handle is not None:
                del self._pending[ack.correlation_id]
            else:
                job = None
        if job is None:
            _log.debug(
                "ack for unknown, unwritten or expired correlation id %r", ack.correlation_id
            )
            return
        if job.handle is not None:
            self._wheel.cancel(job.handle)
        if ack.ack_error:
            settle(job.future, error=error_from_ack_error(ack.ack_error))
        else:
            settle(job.future, dataclasses.replace(ack, partition=job.partition))

    def _arm_timer(self) -> None:
        next_deadline = self._wheel.next_deadline()
        if next_deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_at = math.inf
            return
        if self._timer is not None and self._timer_at <= next_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, next_deadline - time.monotonic()), self._on_timer)
        self._timer_at = next_deadline

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        expired = self._wheel.advance(time.monotonic())
        for job in expired:
            # The entry is this job's own: a later publish reusing its id keeps its entry.
            with self._lock:
                if self._pending.get(job.correlation_id) is job:
                    del self._pending[job.correlation_id]
            settle(job.future, error=self._timed_out(job))
        self._arm_timer()

    @staticmethod
    def _timed_out(job: Job) -> AckTimeoutError:
        if job.handle is None:  # not written: NATS held up an earlier write
            return AckTimeoutError(
                f"NATS did not take the message for {job.subject!r} in time (it was not sent)"
            )
        return AckTimeoutError(
            f"no ack for {job.subject!r} (correlation id {job.correlation_id!r}) in "
            "time; the stream may not exist, or the partition may be paused or "
            "read-only"
        )

    def _map_nats_error(self, exc: BaseException) -> LiftbridgeError:
        errors = self._nats.errors
        if isinstance(exc, errors.MaxPayloadError):
            return PublishRejectedError(
                "publish: the message exceeds the NATS server's max_payload",
                code="MAX_PAYLOAD",
            )
        if isinstance(exc, errors.FlushTimeoutError | asyncio.TimeoutError | TimeoutError):
            return AckTimeoutError("NATS did not confirm the messages in time")
        if isinstance(exc, errors.ConnectionClosedError | errors.ConnectionDrainingError):
            if self._closed:
                return ClientClosedError("NatsPublisher is closed")
            return BrokerUnavailableError("the NATS connection is closed")
        if isinstance(exc, errors.OutboundBufferLimitError):
            return BrokerUnavailableError(
                "NATS is disconnected and the reconnect buffer is full (pending_size)"
            )
        if isinstance(exc, asyncio.CancelledError):
            return ClientClosedError("NatsPublisher is closed")
        error = PublishError(f"NATS publish failed: {str(exc) or type(exc).__name__}")
        error.__cause__ = exc
        return error

    async def _shutdown(self, timeout: float) -> None:
        """Write queued jobs, flush NATS, fail what is left, close (loop thread).

        Writing and flushing share ``timeout``; closing the connection gets what is left
        of it (at least :data:`_CLOSE_GRACE`), after which the connection is cut: nats-py
        would otherwise wait for ever to hand its buffer to a server that stopped reading.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            self._stopping = True
            writer = self._writer
            if writer is not None and not writer.done():
                self._wake_writer()
                done, _ = await asyncio.wait({writer}, timeout=deadline - loop.time())
                if not done:
                    writer.cancel()
            nc = self._nc
            left = deadline - loop.time()
            if nc is not None and nc.is_connected and left > 0:
                try:
                    await nc.flush(timeout=left)  # type: ignore[arg-type]
                except Exception as exc:
                    _log.warning("NATS flush on close failed: %s", exc)
            with self._lock:
                self._pending.clear()
                leftover = list(self._queue)
                self._queue.clear()
                outstanding = list(self._outstanding)
            self._wheel.pop_all()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            error = ClientClosedError("NatsPublisher closed before the publish completed")
            for job in leftover:
                settle(job.future, error=error)
            for future in outstanding:
                settle(future, error=error)
            if nc is not None:
                left = max(deadline - loop.time(), _CLOSE_GRACE)
                try:
                    await asyncio.wait_for(nc.close(), timeout=left)
                except TimeoutError:
                    _log.warning(
                        "NATS did not take the last %d bytes within %.1fs of close(): the "
                        "connection is cut",
                        getattr(nc, "pending_data_size", 0),
                        timeout,
                    )
                    _abort(nc)
                except Exception as exc:  # pragma: no cover - best effort
                    _log.warning("closing the NATS connection failed: %s", exc)
        finally:
            loop.stop()
