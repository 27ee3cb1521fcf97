"""A process out of file descriptors gets a ``LocalResourceError`` at once.

"Too many open files" (``EMFILE``) while an ``"h2"`` publisher or subscription dialled,
or a gRPC channel connected (a unary call's, say ``fetch_metadata``), was taken for an
unreachable broker: retried under the whole retry policy (a first subscribe took about
6 s, a resubscribe up to ``resubscribe_wait``), then raised as a
``BrokerUnavailableError`` that blamed the broker, which was never asked. The process's
open-file limit is lowered and its free descriptors used up in a child process, so that
the next socket fails with ``EMFILE``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Put ahead of each script: ``use_up_descriptors()`` lowers the process's open-file
#: limit and opens files until it is reached, so that the next socket or file fails
#: with ``EMFILE``; it gives the files, to close when descriptors are wanted again.
_USE_UP_DESCRIPTORS = textwrap.dedent(
    """
    import os, resource

    def use_up_descriptors():
        held = []
        top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top + 8, hard))
        try:
            while True:
                held.append(open(os.devnull))
        except OSError:
            pass
        return held
    """
)

_SCRIPT = _USE_UP_DESCRIPTORS + textwrap.dedent(
    """
    import faulthandler, sys, time
    import liftbridge_sync.otel  # imported by a first publish: a file to open
    from liftbridge_sync import Client, LocalResourceError, RetryPolicy, StartAt
    from liftbridge_sync.testing import FakeBroker, FakeCluster, serve
    from tests.waiting import wait_until

    faulthandler.dump_traceback_later(50, exit=True)
    what = sys.argv[1]
    broker = FakeBroker("a", FakeCluster(leader="a")).start()
    broker.subscribe_scripts = [serve([0], "end")] * 3
    # A retry policy that takes 20 s: a retried EMFILE shows in the time taken.
    retry = RetryPolicy(max_attempts=1000, max_delay=20.0, initial=0.1, maximum=0.5)
    client = Client([broker.address], retry=retry, ack_timeout=30.0)
    # Metadata and the unary channel first: they keep the connection they have.
    client.fetch_metadata()

    # A client that has not connected yet, to a broker nothing here is connected to
    # (gRPC channels to one address share their connection): its first call connects.
    other = FakeBroker("b", FakeCluster(leader="b")).start()
    fresh = Client([other.address], retry=retry)

    def run():
        if what == "subscribe":
            return [m.offset for m in client.subscribe("s", start=StartAt.earliest())]
        if what == "metadata":
            return len(fresh.fetch_metadata().brokers)
        return client.publish("s", b"x").offset

    held = use_up_descriptors()
    started = time.monotonic()
    try:
        run()
    except LocalResourceError as exc:
        took = time.monotonic() - started
        assert "no file descriptor left" in str(exc), exc
        assert "ulimit -n" in str(exc), exc
        print(f"LocalResourceError after {took:.2f}s", flush=True)
    except Exception as exc:
        took = time.monotonic() - started
        print(f"{type(exc).__name__} after {took:.2f}s: {exc}", flush=True)
        raise SystemExit(1)
    else:
        print("no error", flush=True)
        raise SystemExit(1)
    for f in held:
        f.close()
    # Descriptors again: works again (a gRPC channel once its reconnect back-off, at
    # most 2 s, has passed: until then it reports its last failure).
    answers = []

    def answered():
        try:
            answers.append(run())
        except LocalResourceError:
            if what != "metadata":
                raise
        return bool(answers)

    wait_until(answered, what="a call to work again")
    print("afterwards", answers[0], flush=True)
    client.close()
    fresh.close()
    broker.stop()
    other.stop()
    """
)


@pytest.mark.parametrize("what", ["subscribe", "publish", "metadata"])
def test_a_dial_without_a_file_descriptor_fails_at_once_with_a_local_error(what: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, what],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],  # for tests.waiting
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    took = float(result.stdout.split("LocalResourceError after ")[1].split("s")[0])
    assert took < 1.0, output
    expected = {"subscribe": "[0]", "publish": "0", "metadata": "1"}[what]
    assert f"afterwards {expected}" in result.stdout, output


_MTLS_SCRIPT = _USE_UP_DESCRIPTORS + textwrap.dedent(
    """
    import faulthandler, sys, tempfile
    from liftbridge_sync import Client, LocalResourceError, RetryPolicy, TLSOptions
    from liftbridge_sync.testing import generate_certificates

    faulthandler.dump_traceback_later(50, exit=True)
    certs = generate_certificates(tempfile.mkdtemp(), clients=["app"])
    cert, key = certs.client("app")
    if sys.argv[1] == "client-cert":
        tls = TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))
    else:  # the system store, read at the first call
        tls = TLSOptions()
    # Nothing listens there: the first call's TLS set-up is what runs out.
    client = Client(["127.0.0.1:1"], tls=tls, retry=RetryPolicy.no_retry())
    held = use_up_descriptors()
    try:
        client.fetch_metadata()
    except LocalResourceError as exc:
        assert "ulimit -n" in str(exc), exc
        print("LocalResourceError", flush=True)
    except Exception as exc:
        print(f"{type(exc).__module__}.{type(exc).__name__}: {exc}", flush=True)
        raise SystemExit(1)
    for f in held:
        f.close()
    client.close()
    """
)


@pytest.mark.parametrize("what", ["client-cert", "system-store"])
def test_the_tls_set_up_without_a_file_descriptor_is_a_local_error(what: str) -> None:
    # The client key is handed to OpenSSL through an in-memory file: without a
    # descriptor for it, the first call of a client with a client certificate raised
    # a bare OSError ("Too many open files"), typed as nothing of this library. The
    # system store's files unread, the client said the store was empty: a
    # ConfigurationError telling the user to set ca_cert.
    result = subprocess.run(
        [sys.executable, "-c", _MTLS_SCRIPT, what], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "LocalResourceError" in result.stdout
