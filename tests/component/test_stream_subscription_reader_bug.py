"""A whole-stream subscription whose reader thread died from an unexpected error (a bug
of ours) raised that error as it was, untyped (an ``AttributeError``, a
``RuntimeError``): it raises :class:`~liftbridge_sync.errors.InternalThreadError`, the
original as ``__cause__``, and the traceback is logged."""

from __future__ import annotations

import logging

import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync.errors import InternalThreadError
from liftbridge_sync.models import Message
from liftbridge_sync.subscription.partition import Subscription
from liftbridge_sync.testing import FakeBroker, serve


def test_a_reader_that_died_of_a_bug_raises_internal_thread_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Subscription) -> Message:
        raise RuntimeError("injected: a bug in the reader")

    with FakeBroker("a") as broker:
        broker.subscribe_scripts = [serve([0], "hang")]
        with Client([broker.address]) as client:
            monkeypatch.setattr(Subscription, "__next__", broken)
            with caplog.at_level(logging.ERROR, logger="liftbridge_sync.subscription"):
                sub = client.subscribe_stream("s", start=StartAt.earliest())
                with pytest.raises(InternalThreadError) as raised:
                    sub.get(10)
            assert isinstance(raised.value.__cause__, RuntimeError)
            assert "liftbridge-subscribe-s-0" in str(raised.value)
            assert sub.closed
            (record,) = [r for r in caplog.records if r.exc_info]
            assert record.exc_info is not None and record.exc_info[1] is raised.value.__cause__
