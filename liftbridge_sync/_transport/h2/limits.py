"""What a broker may make our HTTP/2 connections hold: the limits and their checks.

Every buffer a broker can grow is capped here, whatever it sends and whether or not it
reads what we send (as grpc-go caps its own): a received message at the receive limit
(:func:`max_message_size`), a received frame at the maximum frame size we announced
(checked as soon as its 9-byte header is in), and the output the socket has not taken
at :data:`OUTPUT_CAP` plus :data:`CONTROL_ROOM`. Our own DATA stops being framed at the
cap (it waits, already counted, in the caller's queue), so only the answers the broker
asks for (PING and SETTINGS acknowledgements) can fill the room above it: a broker that
asks for more of them than it reads has flooded the connection, which ends with
``GOAWAY(ENHANCE_YOUR_CALM)`` and a retryable :class:`Flooded`, as grpc-go ends a
connection on a PING flood. Pure functions and constants: thread-safe.
"""

from __future__ import annotations

from liftbridge_sync._transport.h2.sockets import ConnectionLost
from liftbridge_sync.options import ClientOptions

__all__ = ["CONTROL_ROOM", "ENHANCE_YOUR_CALM", "OUTPUT_CAP", "Flooded", "max_message_size"]

#: Output bytes the socket has not taken beyond which no more of our DATA is framed.
OUTPUT_CAP = 1 << 20
#: Room above :data:`OUTPUT_CAP` for the answers a broker asks for (3855 PING ACKs)
#: while it does not read; filling it is a flood.
CONTROL_ROOM = 64 << 10
#: HTTP/2 error code of a GOAWAY for a peer that asks for too much (RFC 9113 §7).
ENHANCE_YOUR_CALM = 0xB


class Flooded(ConnectionLost):
    """The broker asked for more answers (PING, SETTINGS acknowledgements) than it read."""


def max_message_size(options: ClientOptions) -> int:
    """The receive limit: ``max_receive_message_size``, or grpcio's
    ``grpc.max_receive_message_length`` when ``grpc_options`` sets it (as on the channels).
    """
    for name, value in options.grpc_options:
        if name == "grpc.max_receive_message_length" and isinstance(value, int) and value > 0:
            return value
    return options.max_receive_message_size
