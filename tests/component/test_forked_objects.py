"""Objects carried across ``fork()`` refuse to work in the child, instead of hanging or
disturbing the parent.

A consumer group member and a whole-stream subscription are fed by threads that do not
exist in a child made by ``fork()``, and their locks may have been held by parent
threads at fork time. In the child they raise ``ForkedClientError`` at once (before
taking any lock), and ``close()`` returns. Closing a subscription in the child leaves
the parent's call (and the socket both processes share) alone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from liftbridge_sync.testing import FakeBroker

#: Put ahead of each script: ``refusals(calls)`` makes each call (by name) in the child and
#: gives the exit code, 0 when each raised ``ForkedClientError``, else 10 (one returned)
#: or 20 (one raised something else), having printed which.
_REFUSALS = textwrap.dedent(
    """
    from liftbridge_sync import ForkedClientError

    def refusals(calls):
        code = 0
        for name, call in calls.items():
            try:
                call()
                print("no error from", name, flush=True)
                code = code or 10
            except ForkedClientError:
                pass
            except BaseException as exc:
                print(name, "raised", repr(exc), flush=True)
                code = code or 20
        return code
    """
)

_SCRIPT = _REFUSALS + textwrap.dedent(
    """
    import faulthandler, os, sys, threading
    from liftbridge_sync import Client
    from liftbridge_sync.consumer import Consumer
    from liftbridge_sync.subscription.stream import StreamSubscription

    from liftbridge_sync._proto import api_pb2
    from liftbridge_sync.subscription.connection import SubscriptionTarget
    from liftbridge_sync.subscription.partition import Subscription

    class ParentsCall:
        # Stands for the parent's open subscribe call (its socket is shared with the
        # child): cancelling it would shut that socket down under the parent.
        cancelled = False

        def cancel(self):
            ParentsCall.cancelled = True

    client = Client("127.0.0.1:1")  # never connects: no gRPC thread at fork time
    consumer = Consumer(client._core, "g", ["s"], auto_commit=None)
    merged = StreamSubscription(client._core, "s", [])
    target = SubscriptionTarget("s", 0, api_pb2.SubscribeRequest(stream="s"), False, False)
    single = Subscription(client._core, target)
    single._conn.call = ParentsCall()
    buffered = Subscription(client._core, target)
    buffered._buf = [api_pb2.Message(offset=7, value=b"read by the parent")]
    consumer._lock.acquire()  # as if a parent thread held it when the process forked
    single._reading.acquire()  # as if a parent thread waited in its read at the fork
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(15, exit=True)  # a hang fails with a trace
        code = refusals({
            "get": lambda: consumer.get(0.2),
            "commit": consumer.commit,
            "assignment": consumer.assignment,
            "committed": consumer.committed,
            "read_positions": consumer.read_positions,
            "stats": consumer.stats,
            "join": consumer.join,
            "merged get": lambda: merged.get(0.2),
            # Not the parent's positions (stats of a process that reads nothing).
            "merged read_positions": merged.read_positions,
            "single read_positions": single.read_positions,
            # Read in bulk before the fork: the parent delivers it, the child must not.
            "buffered next": lambda: next(buffered),
            "buffered get": lambda: buffered.get(0.2),
            # Not "being read by another thread": that thread is the parent's.
            "single get": lambda: single.get(0.2),
        })
        done = threading.Event()

        def close_both():
            consumer.close()
            merged.close(timeout=1.0)
            single.close()
            done.set()

        threading.Thread(target=close_both, daemon=True).start()
        if not done.wait(5.0):
            print("close() blocked in the child", flush=True)
            code = code or 30
        if ParentsCall.cancelled or not single.closed:
            print("the parent's subscribe call was cancelled from the child", flush=True)
            code = code or 40
        os._exit(code)
    consumer._lock.release()
    single._reading.release()
    _, status = os.waitpid(pid, 0)
    merged.close()
    client.close()
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def _passes(script: str) -> None:
    """Runs ``script`` in a fresh interpreter (it forks); it exits 0, or its output says
    what went wrong."""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_objects_carried_across_fork_refuse_in_the_child() -> None:
    _passes(_SCRIPT)


_FUTURE_LOCKS_SCRIPT = textwrap.dedent(
    """
    import faulthandler, os, threading
    from liftbridge_sync._publishing import futures

    # A parent thread inside a future's resolution (and one creating a condition) at
    # the moment another thread forks.
    held, release = threading.Event(), threading.Event()

    def resolving():
        with futures._CALLBACKS, futures._LAZY:
            held.set()
            release.wait()

    thread = threading.Thread(target=resolving)
    thread.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(15, exit=True)
        free = [lock.acquire(timeout=2) for lock in (futures._CALLBACKS, futures._LAZY)]
        os._exit(0 if all(free) else 1)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    raise SystemExit(os.waitstatus_to_exitcode(status))
    """
)


def test_publish_future_locks_held_at_fork_are_free_in_the_child() -> None:
    """A child forked while a parent thread resolved a publish future gets locks of its
    own: with the parent's (held forever there), its first publish would hang."""
    _passes(_FUTURE_LOCKS_SCRIPT)


_NATS_SCRIPT = _REFUSALS + textwrap.dedent(
    """
    import faulthandler, os, sys, threading
    import nats.aio.client
    from liftbridge_sync.nats import NatsPublisher

    class Nats:  # stands for a connection to a NATS server that takes everything
        is_connected = True
        pending_data_size = 0
        max_payload = 1024 * 1024

        async def connect(self, **kwargs): pass
        async def subscribe(self, subject, cb): pass
        async def flush(self, timeout=None): pass
        async def publish(self, subject, payload, reply=""): pass
        async def close(self): pass

    nats.aio.client.Client = Nats
    pub = NatsPublisher("nats://127.0.0.1:4222")
    pub.publish_raw("s", b"started")  # the liftbridge-nats thread runs
    # as if the liftbridge-nats thread held it when the process forked
    pub._handoff._ledger._lock.acquire()
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(15, exit=True)  # a hang fails with a trace
        code = refusals({
            "publish_async": lambda: pub.publish_async("s", b"v"),
            "publish": lambda: pub.publish("s", b"v", timeout=0.5),
            "publish_raw": lambda: pub.publish_raw("s", b"v"),
            "flush": lambda: pub.flush(0.5),
        })
        done = threading.Event()
        threading.Thread(target=lambda: (pub.close(), done.set()), daemon=True).start()
        if not done.wait(5.0) or not pub.closed:
            print("close() blocked in the child", flush=True)
            code = code or 30
        os._exit(code)
    pub._handoff._ledger._lock.release()
    _, status = os.waitpid(pid, 0)
    pub.publish_raw("s", b"the parent's publisher still works")
    pub.close()
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_nats_publisher_carried_across_fork_refuses_in_the_child() -> None:
    """Its liftbridge-nats thread is the parent's: a publish in the child waited on a
    lock that thread held at fork for ever, or, the lock free, for an ack nobody read."""
    _passes(_NATS_SCRIPT)


_PENDING_FUTURE_SCRIPT = textwrap.dedent(
    """
    import faulthandler, os, sys, time
    from liftbridge_sync import Client, ForkedClientError

    client = Client(sys.argv[1], ack_timeout=30.0)
    future = client.publish_async("s", b"never acknowledged")  # the broker stores it only
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(15, exit=True)  # a hang fails with a trace
        started = time.monotonic()
        code = 0
        if not future.done():
            print("not done in the child", flush=True)
            code = 10
        if not isinstance(future.exception(0.5), ForkedClientError):
            print("exception():", repr(future.exception(0.5)), flush=True)
            code = code or 20
        try:
            future.result()  # no timeout: it hung for good
            print("result() returned", flush=True)
            code = code or 30
        except ForkedClientError:
            pass
        if time.monotonic() - started > 0.4:
            print("the child waited", time.monotonic() - started, flush=True)
            code = code or 40
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    # The parent's publish is the parent's: still pending here.
    assert not future.done(), future
    client.close(0.5)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_publish_future_pending_at_fork_fails_at_once_in_the_child() -> None:
    """A publish pending when the process forked is resolved by the parent's threads,
    which the child lacks: there ``result()`` hung for good (``result(t)`` timed out
    with a bare ``TimeoutError``), where the README promises ``ForkedClientError``."""
    with FakeBroker("a") as broker:
        broker.publish_script = lambda request, count: "store"
        result = subprocess.run(
            [sys.executable, "-c", _PENDING_FUTURE_SCRIPT, broker.address],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert broker.received, "the publish never reached the broker"
