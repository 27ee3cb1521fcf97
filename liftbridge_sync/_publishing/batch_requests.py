"""``publish_batch``: a batch's items framed into requests, then published together.

Every item is checked and framed before any of them is sent (bad input raises first).
Plain values for one fixed partition take the codec's common case: all of them at once
when every item is a value (:meth:`~liftbridge_sync._publishing.publisher.Publisher.
publish_values`). Otherwise the leading run of values and ``(key, value)`` pairs of
bytes goes at once (:func:`~liftbridge_sync._wire.publish_codec.frame_pairs`), for a
fixed partition or the library's own ``ByKey`` (which the codec computes); other
pairs take the head of their partition and their key one by one
(:func:`~liftbridge_sync._wire.publish_codec.frame_keyed`); headers and other types go
through
:func:`~liftbridge_sync._wire.publish_codec.encode_publish`. Thread-safe: it keeps no
state (the publisher is thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from liftbridge_sync._publishing.publisher import Publisher
from liftbridge_sync._publishing.routing import BatchChooser
from liftbridge_sync._wire.publish_codec import (
    encode_publish,
    frame_keyed,
    frame_pairs,
    frame_value,
    head,
)
from liftbridge_sync._wire.validate import check_ack_policy, check_bytes, check_partition
from liftbridge_sync.errors import ArgumentTypeError, LiftbridgeError
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.partitioners import Partitioner

__all__ = ["publish_batch"]


def publish_batch(
    publisher: Publisher,
    stream: str,
    items: list[Any],
    *,
    partition: int | None,
    partitioner: Partitioner | None,
    choose: BatchChooser,
    ack_policy: AckPolicy,
    timeout: float,
    framed: Callable[[], None] | None = None,
) -> list[Ack | None | LiftbridgeError]:
    """Publish ``items`` (values, ``(key, value)`` or ``(key, value, headers)``) and
    wait for every outcome (see ``Client.publish_batch``); ``timeout`` is each
    message's ack timeout, already resolved. ``framed`` is called once every item is
    checked and framed, before any is submitted (telemetry ends the messages'
    ``create`` spans then; not called when an item is refused).

    Raises:
        ArgumentTypeError: a value, key or header is not bytes-like, or a tuple of
            another length (before anything is sent).
        ConfigurationError: other bad arguments (before anything is sent).
    """
    check_ack_policy(ack_policy)
    wants_ack = ack_policy is not AckPolicy.NONE
    next_id = publisher.next_correlation_id
    requests: list[tuple[bytes, str, int, bool]] = []
    add = requests.append
    fixed = None
    if partitioner is None:
        fixed = 0 if partition is None else check_partition("partition", partition)
        fixed_head = head(stream, fixed, ack_policy)  # validates the stream name
        if all(type(item) is bytes for item in items):  # the fastest path
            if framed is not None:  # plain bytes to a checked partition: nothing to refuse
                framed()
            return publisher.publish_values(
                fixed_head, items, partition=fixed, wants_ack=wants_ack, timeout=timeout
            )
    # The leading run of values and (key, value) pairs of bytes at once (C speedups
    # when built): a fixed partition's head, or the head of ByKey's choice for each;
    # ids one generated id + "." + index, unique like the others.
    heads: list[bytes] | None = None
    if fixed is not None:
        heads = [fixed_head]
    elif items:
        partitions = choose.by_key_count()
        # One head per partition: worth building only for at least as many items.
        if partitions is not None and partitions <= len(items):
            heads = [head(stream, p, ack_policy) for p in range(partitions)]
    if heads is not None and items:
        framed_run, run_ids, run_partitions = frame_pairs(heads, items, next_id())
        if run_ids:
            count = len(run_ids)
            if count == len(items):
                # The whole batch at once: its entries are made in one call.
                if framed is not None:
                    framed()
                futures = publisher.submit_values(
                    framed_run,
                    run_ids,
                    partition=run_partitions if fixed is None else fixed,
                    wants_ack=wants_ack,
                    timeout=timeout,
                )
                return publisher.wait_all(futures)
            routed = [fixed] * count if fixed is not None else run_partitions
            requests.extend(zip(framed_run, run_ids, routed, [wants_ack] * count, strict=True))
            items = items[count:]
    # Keyed items: the key's field after the head of the chosen partition, ids one
    # generated id + "." + index (as for the run above).
    base = ""
    for index, item in enumerate(items):
        if fixed is not None and type(item) is bytes:  # the common case, inline
            correlation_id = next_id()
            add(
                (
                    frame_value(fixed_head, item, correlation_id.encode()),
                    correlation_id,
                    fixed,
                    wants_ack,
                )
            )
            continue
        if type(item) is tuple and len(item) == 2:
            key, value = item
            if type(value) is bytes and (key is None or type(key) is bytes):
                chosen = fixed if fixed is not None else choose(key, value)
                if not base:
                    base = next_id()
                correlation_id = f"{base}.{index}"
                request_head = head(stream, chosen, ack_policy)  # cached by the codec
                add(
                    (
                        frame_keyed(request_head, key, value, correlation_id.encode()),
                        correlation_id,
                        chosen,
                        wants_ack,
                    )
                )
                continue
        headers = None
        if isinstance(item, tuple):
            if len(item) == 2:
                key, value = item
            elif len(item) == 3:
                key, value, headers = item
            else:
                raise ArgumentTypeError(
                    "publish_batch items are values, (key, value) pairs or "
                    f"(key, value, headers) triples, not a tuple of {len(item)}"
                )
        else:
            key, value = None, item
        if fixed is not None:
            chosen = fixed
        else:  # a partitioner: it is given checked bytes
            value = check_bytes("value", value)
            key = check_bytes("key", key, optional=True)
            chosen = choose(key, value)
        correlation_id = next_id()
        request = encode_publish(
            stream,
            value,
            partition=chosen,
            key=key,
            headers=headers,
            ack_policy=ack_policy,
            expected_offset=None,
            correlation_id=correlation_id,
        )
        add((request, correlation_id, chosen, wants_ack))
    if framed is not None:
        framed()
    futures = publisher.submit_many(requests, timeout=timeout)
    return publisher.wait_all(futures)
