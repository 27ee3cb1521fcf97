"""The evidence cluster tests need before blaming a lost message on the server's log."""

from __future__ import annotations

import pytest

from liftbridge_sync import Ack, AckPolicy, Message
from tests.integration._rewrites import judge_missing, overwritten_after_ack, reread_after_rewrite
from tests.messages import make_message


def _ack(offset: int, commit_ns: int) -> Ack:
    return Ack(
        stream="s",
        partition=1,
        partition_subject="s",
        message_subject="s.1",
        offset=offset,
        ack_inbox="inbox",
        correlation_id="c",
        ack_policy=AckPolicy.ALL,
        commit_timestamp_ns=commit_ns,
    )


def _message(offset: int, value: bytes, timestamp_ns: int) -> Message:
    return make_message(offset, value, partition=1, timestamp_ns=timestamp_ns)


def test_an_offset_holding_a_message_written_after_its_ack_proves_a_rewrite() -> None:
    log = {(1, 7): _message(7, b"other", 2_000)}
    proof = overwritten_after_ack(_ack(7, 1_000), log)
    assert proof is not None and "b'other'" in proof


def test_an_older_message_at_the_acked_offset_proves_nothing() -> None:
    # What an ack matched to the wrong publish would look like: the client's fault.
    log = {(1, 7): _message(7, b"other", 900)}
    assert overwritten_after_ack(_ack(7, 1_000), log) is None
    assert overwritten_after_ack(_ack(8, 1_000), log) is None  # past the end
    assert overwritten_after_ack(_ack(7, 0), log) is None  # no commit time


def test_a_reader_that_saw_another_value_at_the_offset_skipped_it_after_a_rewrite() -> None:
    delivered_at = {(1, 7): b"first", (1, 8): b"same"}
    assert reread_after_rewrite((1, 7), b"second", delivered_at) is not None
    assert reread_after_rewrite((1, 8), b"same", delivered_at) is None
    assert reread_after_rewrite((1, 9), b"never read", delivered_at) is None


def test_missing_messages_xfail_only_when_every_one_is_proven_rewritten() -> None:
    log = {(1, 7): _message(7, b"other", 2_000), (1, 8): _message(8, b"x", 500)}
    judge_missing({}, log)  # nothing missing: nothing to say
    with pytest.raises(pytest.xfail.Exception, match="v1.9.0 rewrote"):
        judge_missing({b"lost": _ack(7, 1_000)}, log)
    with pytest.raises(pytest.fail.Exception, match="b'mine'"):
        judge_missing({b"lost": _ack(7, 1_000), b"mine": _ack(8, 1_000)}, log)
    with pytest.raises(pytest.fail.Exception):
        judge_missing({b"unacked": None}, log)
