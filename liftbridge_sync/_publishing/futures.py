"""Cheap publish futures: real ``concurrent.futures.Future`` objects, resolved in bulk.

``Future()`` builds a ``threading.Condition`` (about 2 µs) and ``set_result`` takes it and
notifies under it, then runs the callbacks: with one internal done-callback that is
8–9 µs per publish, more than the whole rest of the pipelined path. A
:class:`PublishFuture` starts ``RUNNING`` (an in-flight publish cannot be cancelled),
creates its condition and waiter list only when some thread needs them (``result()``
on an unfinished future, ``concurrent.futures.wait``/``as_completed``), and is resolved
by :func:`settle` together with the other futures of the same batch of acks: one lock
for the batch, a notify only for futures somebody waits on.

Why this is safe: a future is resolved by exactly one thread (the one that removed its
entry from the publisher's pending table). :func:`settle` sets the outcome and the state
*before* it looks for a condition; a waiter creates the condition *before* it looks at
the state (under the condition). Either the waiter sees ``FINISHED``, or :func:`settle`
sees the condition and notifies under it. Done-callbacks are registered and taken under
one module-wide lock, so each runs exactly once. Everything here is thread-safe.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from liftbridge_sync._publishing.gates import Gate
from liftbridge_sync._wire import speedups as _speedups
from liftbridge_sync._wire.speedups import run_callbacks as _run_callbacks
from liftbridge_sync._wire.speedups import settle_acks as _settle_acks
from liftbridge_sync._wire.validate import check_timeout

__all__ = [
    "NO_CALLBACKS",
    "FailureSink",
    "FutureCore",
    "PublishFuture",
    "PyFutureCore",
    "Unobserved",
    "fail_in_forked_child",
    "settle",
    "settle_acks",
    "settle_plain",
    "take_acks",
    "wait_gated",
]

_log = logging.getLogger("liftbridge_sync.publisher")

T = TypeVar("T")
_FINISHED = "FINISHED"
_RUNNING = "RUNNING"
_DONE = frozenset((_FINISHED, "CANCELLED", "CANCELLED_AND_NOTIFIED"))
#: Guards the lazy creation of conditions (rare: only when somebody blocks).
_LAZY = threading.Lock()
#: Guards every publish future's callbacks against its resolution, and is the lock of
#: every future's condition: ``concurrent.futures.wait`` counts the futures not done
#: and installs its waiter under their conditions, and a future resolved in between
#: (its state set under another lock) was counted done and yet notified to the waiter,
#: which then ended the wait with a future still running. Reentrant: ``wait`` takes
#: the condition of each of its futures in turn.
_CALLBACKS = threading.RLock()


def _new_locks_in_child() -> None:
    """After ``fork()``: another thread of the parent may have held either lock, and it
    does not exist in the child; the child's futures (its rebuilt publisher's) need
    locks nobody holds. Every user looks the locks up at call time."""
    global _LAZY, _CALLBACKS
    _LAZY = threading.Lock()
    _CALLBACKS = threading.RLock()


os.register_at_fork(after_in_child=_new_locks_in_child)

#: ``_done_callbacks`` of a future without any (compared by identity: a callable may
#: well be falsy).
NO_CALLBACKS: Any = ()


class Unobserved(Protocol):
    """A failed future's outcome that nobody has retrieved yet (see the publisher's ledger).

    Attached to the future as its ``ledger`` when it fails; ``result()``/``exception()``
    call :meth:`observed`. Implementations must be thread-safe.
    """

    def observed(self, future: PublishFuture[Any]) -> None:
        """``future``'s outcome was retrieved."""


class FailureSink(Protocol):
    """Where failures are recorded: hands out the :class:`Unobserved` of each one.

    Implementations must be thread-safe: failures come from any thread.
    """

    def tracker(self, error: BaseException) -> Unobserved:
        """The :class:`Unobserved` to attach to a future that failed with ``error``."""
        ...


def peek(future: PublishFuture[T]) -> tuple[T | None, BaseException | None]:
    """A resolved future's ``(result, exception)`` without counting as looking at it.

    For the library's own observers (telemetry), which must not hide a failure from
    ``flush()``. Only meaningful once ``future`` is done.
    """
    return future._result, future._exception


class PyFutureCore:
    """A publish future's state: the pure-Python twin of ``_speedups.FutureCore``.

    The C type keeps these fields in a struct that the C settling code reads and writes
    directly; this twin keeps them as class-level defaults, so that a new future costs
    no attribute stores at all (its instance dict is made when it resolves). Both have
    the same attributes. The outcome, state, callbacks, ledger and gate are set under
    :data:`_CALLBACKS`; the waited flags by a waiter under ``_LAZY`` (the module
    docstring says why that order is safe). Thread-safe as the module says.
    """

    ledger: Unobserved | None = None
    # ``_done_callbacks`` is NO_CALLBACKS (an empty tuple) until the first callback is
    # added, that callback alone (no list: one object less per publish for the garbage
    # collector), and a list from the second on.
    _state = _RUNNING
    _result: Any = None
    _exception: BaseException | None = None
    _done_callbacks: Any = NO_CALLBACKS
    #: Set once some thread blocks on it (:func:`wait_gated`, or with ``_condition`` and
    #: ``_waiters``): whoever resolves it then wakes that thread. A flag rather than a
    #: look into ``__dict__``: that look would build the instance's dict, one more
    #: object per publish for the cyclic garbage collector to walk.
    _waited = False
    #: ``_condition`` and ``_waiters`` exist.
    _conditioned = False
    #: The gate of the thread blocked in :func:`wait_gated` on it, opened (and
    #: cleared) by whoever resolves it.
    _gate: Any = None


if TYPE_CHECKING:
    FutureCore = PyFutureCore
else:
    #: The base that holds a publish future's state: the C struct when the speedups
    #: are active (the C settling code then needs no attribute lookups), else the twin.
    FutureCore = _speedups.FutureCore or PyFutureCore


class PublishFuture(FutureCore, concurrent.futures.Future[T]):
    """A ``concurrent.futures.Future`` with a lazily created condition.

    Works with ``result``, ``exception``, ``add_done_callback``, ``wait`` and
    ``as_completed`` like any other; ``cancel()`` returns ``False`` (it starts running).
    A failed one notes when its outcome is retrieved (``result``/``exception``) in its
    ``ledger``: a failure dropped unretrieved is what ``flush()`` reports. Its state
    lives in :data:`FutureCore`.
    Thread-safe.
    """

    # No super().__init__ (see the module docstring), and no Python frame either: object's
    # own C ``__init__`` (a publish creates one future; a frame costs about 0.1 µs).
    __init__ = object.__init__

    def __getattr__(self, name: str) -> Any:
        if name != "_condition" and name != "_waiters":
            raise AttributeError(name)
        fields = self.__dict__
        with _LAZY:
            if "_condition" not in fields:
                fields["_waiters"] = []
                # On the lock the state is set under (see _CALLBACKS).
                fields["_condition"] = threading.Condition(_CALLBACKS)
                # Attributes, not dict entries: with the C core they live in its struct.
                self._conditioned = True
                self._waited = True
        return fields[name]

    def done(self) -> bool:
        """True once resolved (publish futures cannot be cancelled)."""
        return self._state in _DONE

    # running(), cancel() and cancelled() without the condition concurrent.futures
    # takes for them (and this class would build): a publish starts running and is
    # never cancelled.

    def running(self) -> bool:
        """True until resolved."""
        return self._state == _RUNNING

    def cancel(self) -> bool:
        """``False``: an in-flight publish cannot be withdrawn."""
        return False

    def cancelled(self) -> bool:
        """``False``: publish futures are never cancelled."""
        return False

    def result(self, timeout: float | None = None) -> T:
        """The ack; raises the publish's typed error.

        ``timeout`` is seconds to wait (``None`` or ``inf``: as long as it takes); NaN,
        negative or above ~24 days raises ``ConfigurationError``.
        """
        if timeout is not None:
            timeout = check_timeout("timeout", timeout)
        try:
            if self._state == _FINISHED:
                if self._exception is not None:
                    raise self._exception
                return self._result  # type: ignore[no-any-return]
            return super().result(timeout)
        finally:
            ledger = self.ledger  # set (before the state) only on a failure
            if ledger is not None:
                ledger.observed(self)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The publish's error, ``None`` on success (``timeout`` as for :meth:`result`)."""
        if timeout is not None:
            timeout = check_timeout("timeout", timeout)
        try:
            if self._state == _FINISHED:
                return self._exception
            return super().exception(timeout)
        finally:
            ledger = self.ledger
            if ledger is not None:
                ledger.observed(self)

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        """Run ``fn(self)`` once resolved (at once, on this thread, if it already is)."""
        _CALLBACKS.acquire()  # not ``with``: half the cost, once per publish
        try:
            if self._state != _FINISHED:
                callbacks = self._done_callbacks
                if callbacks is NO_CALLBACKS:
                    self._done_callbacks = fn
                elif type(callbacks) is list:
                    callbacks.append(fn)
                else:
                    self._done_callbacks = [callbacks, fn]
                return
        finally:
            _CALLBACKS.release()
        try:
            fn(self)
        except Exception:
            _log.exception("exception calling callback for %r", self)

    def set_result(self, result: T) -> None:
        """Resolve (publisher use; raises ``InvalidStateError`` if already resolved)."""
        if not settle(((self, result, None),)):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def set_exception(self, exception: BaseException | None) -> None:
        """Fail (publisher use; raises ``InvalidStateError`` if already resolved)."""
        if not settle(((self, None, exception),)):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")


def _prime_attribute_layout() -> None:
    """With the pure-Python core: store every attribute a publish future ever gets once,
    on a throwaway instance.

    CPython 3.11 keeps instance attributes in a per-class shared layout and stops
    adding names to it once many instances exist. Futures are created by the thousand
    before the first one resolves, so ``_result`` and ``_state`` would be refused by the
    layout, and every future from then on would carry a dict of its own: one more
    object per publish for the garbage collector. (The C core keeps them in its struct.)
    """
    if FutureCore is not PyFutureCore:
        return
    future: PublishFuture[Any] = PublishFuture()
    for name in (
        "_result",
        "_exception",
        "_state",
        "_done_callbacks",
        "ledger",
        "_waited",
        "_conditioned",
        "_gate",
    ):
        setattr(future, name, getattr(future, name))


_prime_attribute_layout()


def fail_in_forked_child(future: PublishFuture[Any], error: BaseException) -> None:
    """Fail ``future``, pending in the parent, with ``error`` in a forked child.

    Without the locks (a parent's thread may have held them at the fork) and without
    its done-callbacks, which the parent registered for the parent's process: only its
    outcome is set, so that ``result()`` and ``exception()`` raise it at once.
    """
    if future._state == _RUNNING:
        future._exception = error
        future._state = _FINISHED


def settle_plain(
    outcomes: Iterable[tuple[PublishFuture[Any], Any]],
    before_waking: Callable[[list[int]], object] | None = None,
) -> list[int]:
    """Resolve with results the futures that have no done-callbacks; the positions of
    the others (left alone: with callbacks, so that they run where the caller wants, or
    already resolved).

    ``before_waking`` is given those positions after the futures are resolved and
    before the threads blocked on them wake: what they do next (``publish()`` again
    with the same correlation id) must find the entries out of the pending table, as
    the C ``settle_acks`` leaves it.
    """
    skipped: list[int] = []
    waited: list[PublishFuture[Any]] = []
    with _CALLBACKS:
        for i, (future, result) in enumerate(outcomes):
            if future._done_callbacks is not NO_CALLBACKS or future._state == _FINISHED:
                skipped.append(i)
                continue
            future._result = result
            future._state = _FINISHED
            if future._waited:
                waited.append(future)
    if before_waking is not None:
        before_waking(skipped)
    _notify(waited)
    return skipped


def _notify(waited: Iterable[PublishFuture[Any]]) -> None:
    """Wake the waiters of futures just resolved with a result."""
    for future in waited:
        gate = future._gate
        if gate is not None:
            _open(future, gate)
        if not future._conditioned:
            continue
        condition = future._condition
        with condition:
            for waiter in future._waiters:
                waiter.add_result(future)
            condition.notify_all()


#: Each thread's :class:`~.gates.Gate` for :func:`wait_gated`, made once and reused.
_GATES = threading.local()


def _open(future: PublishFuture[Any], gate: Any) -> None:
    """Open the gate of the thread blocked on ``future``: by the one thread that
    resolved it (so exactly once), after the state says finished."""
    future._gate = None
    gate.open()


def wait_gated(future: PublishFuture[Any]) -> None:
    """Block the calling thread until ``future`` is resolved, on a gate of its own.

    The cheapest wait there is: one :class:`~.gates.Gate`, made once per thread and reused,
    that whoever resolves the future opens (:func:`_notify`, :func:`settle`); no
    ``Condition`` is built, and the resolver takes no lock of the waiter's. Unbounded:
    for a future that resolves or fails by itself (a publish's own deadline bounds it).
    If the wait is interrupted (``KeyboardInterrupt``) the thread's gate is dropped,
    since a resolver may still open it. Thread-safe; one waiter per future.
    """
    gate = getattr(_GATES, "gate", None)
    if gate is None:
        gate = Gate()
    with _CALLBACKS:
        # Under the lock the resolvers set the state under: either they see the gate,
        # or this sees the state finished.
        if future._state == _FINISHED:
            _GATES.gate = gate
            return
        future._gate = gate
        future._waited = True
    # Taken from the thread until closed again below: interrupted (KeyboardInterrupt),
    # it is dropped, as the resolver may still open it.
    _GATES.gate = None
    gate.wait()  # opened by whoever resolves the future; the GIL released meanwhile
    _GATES.gate = gate


def settle_acks(acks: list[Any], pending: dict[str, Any]) -> int:
    """With the C speedups: resolve in bulk the leading run of ``acks`` (C-decoded
    :class:`~liftbridge_sync.models.Ack` objects) whose entry in the publisher's
    ``pending`` table (``.future``, ``.partition``) has a future without done-callbacks,
    as :func:`settle_plain` would, taking the entries out of ``pending``. Returns how
    many it took (always 0 without the speedups); the rest is left to the caller."""
    if _settle_acks is None:
        return 0
    count, waited = _settle_acks(acks, pending, _CALLBACKS, False)
    if waited:
        _notify(waited)
    return count


def take_acks(acks: list[Any], pending: dict[str, Any]) -> tuple[int, list[PublishFuture[Any]]]:
    """With the C speedups, on the publisher (owner) thread: pop the entries of the
    leading run of C-decoded acks from ``pending`` and resolve their futures (an ack
    with no entry, or for a future already resolved, is dropped). Returns how many acks
    it went through and the resolved futures with done-callbacks or waiters, for
    :func:`settle` (``resolved=``) to run and wake. ``(0, [])`` without the speedups."""
    if _settle_acks is None:
        return 0, []
    return _settle_acks(acks, pending, _CALLBACKS, True)


def settle(
    outcomes: Iterable[tuple[PublishFuture[Any], Any, BaseException | None]],
    ledger: FailureSink | None = None,
    resolved: Iterable[PublishFuture[Any]] = (),
) -> int:
    """Resolve futures in bulk: ``(future, result, error)``; returns how many changed.

    Futures already resolved are skipped. Each failure gets its tracker from ``ledger``
    *before* its state says finished: a thread that sees the future finished sees the
    tracker too, and retrieving the outcome marks it observed (a callback that looks
    at it included). Waiters are woken, then done-callbacks run on the calling thread
    (a failing callback is logged, as ``concurrent.futures`` does), first those of
    ``resolved`` (futures already resolved by :func:`take_acks`, whose waiters and
    callbacks are still to run).
    """
    changed = 0
    ready: list[PublishFuture[Any]] = list(resolved)  # those with callbacks or a condition
    with _CALLBACKS:
        for future, result, error in outcomes:
            if future._state == _FINISHED:
                continue
            future._result = result
            future._exception = error
            if error is not None and ledger is not None:
                future.ledger = ledger.tracker(error)
            future._state = _FINISHED
            changed += 1
            if future._done_callbacks is not NO_CALLBACKS or future._waited:
                ready.append(future)
    # A condition created after the check above was created after the state was set:
    # its waiter sees FINISHED without being notified.
    index = 0
    while index < len(ready):
        if _run_callbacks is not None:
            # C speedups: the callbacks of futures nobody waits on, up to the first
            # future with waiters (handled below, then on again in C).
            index, errors = _run_callbacks(ready, index)
            for future, error in errors:
                _log.error("exception calling callback for %r", future, exc_info=error)
            if index >= len(ready):
                break
        future = ready[index]
        index += 1
        gate = future._gate
        if gate is not None:
            _open(future, gate)
        if future._conditioned:
            with future._condition:
                for waiter in future._waiters:
                    if future._exception is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
                future._condition.notify_all()
        callbacks = future._done_callbacks
        if callbacks is not NO_CALLBACKS:
            # The class default again: add_done_callback never adds to a resolved
            # future's callbacks.
            future._done_callbacks = NO_CALLBACKS
            for callback in callbacks if type(callbacks) is list else (callbacks,):
                try:
                    callback(future)
                except (Exception, SystemExit):  # SystemExit: see run_callbacks (C)
                    _log.exception("exception calling callback for %r", future)
    return changed
