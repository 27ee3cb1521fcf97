"""Direct NATS publishing: envelopes straight to a stream's NATS subject.

Liftbridge partition leaders subscribe to their partition's NATS subject (the stream
subject for partition 0, ``<subject>.<N>`` for partition N). :class:`NatsPublisher`
publishes Liftbridge envelopes (:func:`~liftbridge_sync.envelope.new_message`) there
over its own NATS connection, without a gRPC round trip, and collects the leader's acks
on a private ack inbox.

This is the optional extra ``nats``: nats-py is imported only when a
:class:`NatsPublisher` is created, so ``import liftbridge_sync`` never needs it. Install
it with ``pip install liftbridge-sync[nats]``.

What a direct publish does **not** do, unlike ``Client.publish`` (gRPC):

* A **paused partition is not resumed**: its leader is not subscribed to the subject
  while paused, so the message is simply not stored (you get an ack timeout).
* There is **no error for a missing stream or partition**: nobody listens on the
  subject, so the publish ends with :class:`~liftbridge_sync.errors.AckTimeoutError`
  (or, with ``AckPolicy.NONE``, succeeds and the message is lost).
* A **read-only partition** gives no ``ReadonlyPartitionError``: the message is not
  stored and the publish ends with an ack timeout.
* No authorization on the stream (NATS permissions on the subject apply instead), and
  ``AckPolicy.NONE`` is accepted on streams with optimistic concurrency control (the
  gRPC path refuses it).
* Anything that is not a valid envelope (e.g. :meth:`NatsPublisher.publish_raw`) is
  stored verbatim as the message value, without key or ack.

The leader still refuses a message with an error ack (``INCORRECT_OFFSET``,
``TOO_LARGE``, ``ENCRYPTION``); those fail the publish with a typed error.

Delivery is at-most-once: nothing is re-sent. If the NATS connection drops, nats-py
reconnects, for as long as it takes unless ``max_reconnect_attempts`` says otherwise, and
buffers publishes meanwhile (up to its ``pending_size``), but acks sent
while disconnected are lost, so those publishes fail with ``AckTimeoutError`` although
the message may have been stored.

Threading: nats-py is asyncio-only, so each publisher runs a private event loop in one
daemon thread named ``liftbridge-nats``, started on first use and joined by
:meth:`NatsPublisher.close` (as are the ``liftbridge-nats-dns`` threads resolving a host
name). Callers on any thread hand work to it with
``loop.call_soon_threadsafe`` / ``asyncio.run_coroutine_threadsafe``. Ack timeouts come
from a hashed timer wheel driven by one loop timer: no thread or timer object per message.
"""

from __future__ import annotations

from liftbridge_sync.nats._support import partition_subject
from liftbridge_sync.nats.publisher import NatsPublisher

__all__ = ["NatsPublisher", "partition_subject"]
