"""What a refusal means is asked with at least ``ATTEMPT_AT_LEAST``, like the rest of
the attempt it ends: asked within the ``get(timeout)`` it runs in, once that had nearly
run out, each broker had about 0.01 s to answer, and a deleted stream or a paused
partition was taken for a passing refusal (the ``get`` then timed out)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.errors import PartitionPausedError, StreamDeletedError
from liftbridge_sync.subscription import lookup
from liftbridge_sync.testing import FakeBroker, SubscribeScript, refuse, serve

#: Raised for the test, so that the broker's slow answers (below) fit in it and not in
#: the get() timeout: the bound, not the machine's speed, decides.
_AT_LEAST = 3.0
#: How long each metadata answer takes (the fault: a slow broker).
_SLOW = 0.3
#: The get() timeout: spent by the look-up of the leader before the refusal.
_TIMEOUT = 0.1


class _Changing(FakeBroker):
    """A broker whose metadata answers take :data:`_SLOW` seconds and, once
    :attr:`refused` is set (by the refusing subscribe script), list the stream's
    partition as paused, or without it (deleted: the stream made again with fewer), per
    :attr:`what`."""

    def __init__(self, what: str) -> None:
        super().__init__("a")
        self.what = what
        self.refused = threading.Event()
        self._never = threading.Event()

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        self._never.wait(_SLOW)  # the scripted fault: a slow answer
        response = super().FetchMetadata(request, context)
        if not self.refused.is_set():
            return response
        for stream in response.streamMetadata:
            if self.what == "deleted":
                del stream.partitions[0]
            else:
                stream.partitions[0].paused = True
        return response

    def refusal(self, code: str, details: str) -> SubscribeScript:
        """:func:`refuse`, which first sets :attr:`refused`."""
        script = refuse(code, details)

        def refusing(
            request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
        ) -> Iterator[api_pb2.Message]:
            self.refused.set()
            yield from script(request, context)

        return refusing


@pytest.mark.parametrize(
    ("what", "refusal", "error"),
    [
        ("deleted", ("NOT_FOUND", "no such partition"), StreamDeletedError),
        (
            "paused",
            ("INTERNAL", "Failed to create stream reader: segment has been closed"),
            PartitionPausedError,
        ),
    ],
)
def test_a_refusal_met_as_the_get_timeout_runs_out_is_still_explained(
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    refusal: tuple[str, str],
    error: type[Exception],
) -> None:
    monkeypatch.setattr(lookup, "ATTEMPT_AT_LEAST", _AT_LEAST)
    broker = _Changing(what)
    broker.start()
    try:
        broker.subscribe_scripts = [
            serve([0], ("UNAVAILABLE", "scripted: gone")),
            broker.refusal(*refusal),
        ]
        with Client([broker.address], subscribe_transport="grpc") as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert sub.get(5).offset == 0
            # The stream broke: this get() resubscribes, its look-up of the leader
            # (stale after the loss) taking longer than the timeout, which the attempt
            # under way is given ATTEMPT_AT_LEAST past; the refusal then comes.
            with pytest.raises(error):
                sub.get(_TIMEOUT)
            assert broker.refused.is_set()
    finally:
        broker.stop()
