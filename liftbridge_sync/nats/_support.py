"""Pieces of the NATS publisher shared by its caller side and its loop side.

Jobs handed to the writer, settling futures, argument checks, and importing nats-py on
demand. Functions and plain data: thread-safe where they say so.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import logging
import threading
from collections.abc import Callable, Collection
from types import ModuleType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from liftbridge_sync._durations import check_seconds
from liftbridge_sync._runtime.doorbell import wait_sliced
from liftbridge_sync._runtime.timerwheel import TimerHandle
from liftbridge_sync._wire.validate import (
    check_int,
    check_partition,
    check_subject,
)
from liftbridge_sync.models import Ack

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_FLUSH_TIMEOUT",
    "DNS_THREAD_NAME",
    "INSTALL_HINT",
    "THREAD_NAME",
    "AckFuture",
    "DnsExecutor",
    "Job",
    "check_nats_numbers",
    "check_timeout_arg",
    "import_nats",
    "partition_subject",
    "settle",
    "wait_all",
    "wait_future",
]

_log = logging.getLogger("liftbridge_sync.nats")

AckFuture = concurrent.futures.Future[Ack | None]

INSTALL_HINT = "pip install liftbridge-sync[nats]"
THREAD_NAME = "liftbridge-nats"
DNS_THREAD_NAME = "liftbridge-nats-dns"

_P = ParamSpec("_P")
_T = TypeVar("_T")
DEFAULT_FLUSH_TIMEOUT = 10.0


#: ``nats.connect``'s numeric options: the smallest value each takes, and whether it is
#: seconds (else an int). nats-py checks none of them: ``ping_interval=0`` pinged
#: without pause, and acks were missed; ``reconnect_time_wait=-1`` or
#: ``max_reconnect_attempts=nan`` were taken silently.
_NATS_NUMBERS: dict[str, tuple[float, bool]] = {
    "ping_interval": (0.001, True),
    "reconnect_time_wait": (0.0, True),
    "drain_timeout": (0.001, True),
    "max_outstanding_pings": (1, False),
    "max_reconnect_attempts": (-1, False),  # -1: for ever
    "pending_size": (1, False),
    "flusher_queue_size": (1, False),
}


def check_nats_numbers(options: dict[str, Any]) -> None:
    """Check the numeric options passed through to ``nats.connect``.

    Raises:
        ArgumentTypeError: not a number (seconds) or an int.
        ConfigurationError: NaN, infinite, or below the option's smallest value.
    """
    for name, (smallest, seconds) in _NATS_NUMBERS.items():
        if name not in options:
            continue
        label = f"NATS option {name}"
        if seconds:
            check_seconds(
                label,
                options[name],
                allow_zero=smallest == 0,
                unlimited=False,
                minimum=smallest,
            )
        else:
            check_int(label, options[name], minimum=int(smallest))


def import_nats() -> ModuleType:
    """Import nats-py, or explain how to install it."""
    try:
        return importlib.import_module("nats")
    except ImportError as exc:
        raise ImportError(
            f"liftbridge_sync.nats needs nats-py, which is not installed: {INSTALL_HINT}"
        ) from exc


def partition_subject(stream_subject: str, partition: int = 0) -> str:
    """The NATS subject a stream partition's leader listens on.

    Args:
        stream_subject: The stream's subject (as given to ``create_stream``).
        partition: Partition id (>= 0).

    Returns:
        ``stream_subject`` for partition 0, ``"<stream_subject>.<partition>"`` otherwise.

    Raises:
        ConfigurationError: The subject or partition is invalid.

    Pure function; safe to call from any thread.
    """
    subject = check_subject("stream_subject", stream_subject)
    number = check_partition("partition", partition)
    return subject if number == 0 else f"{subject}.{number}"


def check_timeout_arg(
    name: str, value: object, *, optional: bool, unlimited: bool = False
) -> float | None:
    """Seconds > 0: ``None`` when ``optional`` (the caller's default), ``inf`` (as ``None``)
    when ``unlimited``; else finite and at most ~24 days.

    Raises:
        ConfigurationError: anything else (``ArgumentTypeError`` for a non-number).
    """
    if value is None and optional:
        return None
    return check_seconds(name, value, allow_zero=False, unlimited=unlimited)


@dataclasses.dataclass(slots=True, eq=False)
class Job:
    """One unit of work for the writer: a publish, a raw publish or a flush marker."""

    kind: str  # "ack" (wants an ack), "none" (AckPolicy.NONE), "raw", "flush"
    future: concurrent.futures.Future[Any]
    subject: str = ""
    payload: bytes = b""
    reply: str = ""
    correlation_id: str = ""
    partition: int = -1
    #: Monotonic ack deadline ("ack", "none"), or until when nats-py may take the message
    #: ("raw"); for "flush", the NATS flush timeout.
    deadline: float = 0.0
    #: The job's ack timer, set on the loop thread just before the job is written.
    handle: TimerHandle[Job] | None = None


def settle(
    future: concurrent.futures.Future[Any],
    result: object = None,
    error: BaseException | None = None,
) -> None:
    """Resolve ``future`` unless it is already done (e.g. cancelled by its owner)."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:  # cancelled concurrently
        pass


def wait_future(future: concurrent.futures.Future[_T], seconds: float | None) -> _T:
    """``future.result(seconds)`` (``None``: no limit) in sleeps of at most
    :data:`~liftbridge_sync._runtime.doorbell.WAIT_SLICE`
    (:func:`~liftbridge_sync._runtime.doorbell.wait_sliced`: a Ctrl-C that did not wake
    the sleep comes within one, not at the timeout).

    Raises:
        TimeoutError: ``future`` is not done within ``seconds`` (or failed with one).
        concurrent.futures.CancelledError: ``future`` was cancelled.
        BaseException: What ``future`` failed with.

    Thread-safe.
    """
    done = wait_sliced(lambda step: not _not_done_after({future}, step), seconds)
    if not done and not future.done():  # (done just now: its outcome after all)
        raise TimeoutError(f"not done within {seconds:g}s")
    return future.result()  # done: its outcome (its own TimeoutError too), at once


def wait_all(
    futures: Collection[concurrent.futures.Future[Any]], seconds: float | None
) -> set[concurrent.futures.Future[Any]]:
    """``concurrent.futures.wait(futures, seconds)`` (``None``: no limit) in sleeps of at
    most :data:`~liftbridge_sync._runtime.doorbell.WAIT_SLICE`, for the reason
    :func:`wait_future` gives.

    Returns:
        The futures not done in time.

    Thread-safe.
    """
    not_done = set(futures)

    def all_done(step: float) -> bool:
        nonlocal not_done
        not_done = _not_done_after(not_done, step)
        return not not_done

    wait_sliced(all_done, seconds)
    return not_done


def _not_done_after(
    futures: set[concurrent.futures.Future[Any]], seconds: float
) -> set[concurrent.futures.Future[Any]]:
    """Those of ``futures`` still not done after waiting ``seconds`` for all of them."""
    return concurrent.futures.wait(futures, timeout=seconds).not_done


class DnsExecutor(concurrent.futures.ThreadPoolExecutor):
    """The publisher's event loop's default executor: each call on its own thread.

    asyncio runs ``getaddrinfo`` there when nats-py connects to a host name; left alone it
    would start an ``asyncio_0`` pool thread that nobody joins. asyncio accepts only a
    ``ThreadPoolExecutor``, so this is one, but it starts no pool: each call (one per
    connection attempt) runs on a daemon thread named ``liftbridge-nats-dns``, and
    :meth:`join` waits for the calls under way with a bound.

    Thread-safe.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix=DNS_THREAD_NAME)  # starts nothing
        self._calls_lock = threading.Lock()
        self._calls: set[threading.Thread] = set()
        self._refusing = False

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
            finally:
                with self._calls_lock:
                    self._calls.discard(threading.current_thread())

        thread = threading.Thread(target=run, name=DNS_THREAD_NAME, daemon=True)
        with self._calls_lock:
            if self._refusing:
                # asyncio's own executor's words: run_in_executor expects them.
                raise RuntimeError("cannot schedule new futures after shutdown")
            # Started under the lock: join() (close() on any thread) must never take a
            # thread not started yet, whose join raises RuntimeError. The thread's own
            # discard waits for the lock, so it comes after the add.
            thread.start()
            self._calls.add(thread)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._calls_lock:
            self._refusing = True
        if wait:
            self.join(None)
        super().shutdown(wait=False)

    def join(self, timeout: float | None) -> bool:
        """Wait for the calls under way (``None``: no limit); whether none is left."""

        def none_left(step: float) -> bool:
            thread = self._a_call()
            if thread is not None:
                thread.join(step)
                thread = self._a_call()
            return thread is None

        # In slices: a Ctrl-C that did not wake the sleep is raised within one.
        return wait_sliced(none_left, timeout)

    def _a_call(self) -> threading.Thread | None:
        """One of the calls under way, if any."""
        with self._calls_lock:
            return next(iter(self._calls), None)
