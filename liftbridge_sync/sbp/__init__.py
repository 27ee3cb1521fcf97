"""The frame layer of the Streaming Batch Protocol (SBP) v0.1.

SBP (specified in ``shared/seeds/streaming-batch-protocol-v0.1.md``) is a big-endian,
frame-based batch and streaming protocol. This package encodes and decodes its frames and
nothing else: it opens no socket, shares nothing with the Liftbridge client's transports,
and keeps the extended header (FlatBuffers) and the payload opaque. Every frame is::

    offset  size  field
    0       4     frame length   = 16 + len(extended header) + len(payload)
    4       1     magic code     = 23
    5       2     operation code (:class:`Opcode`)
    7       1     flags          (:class:`Flags`)
    8       4     stream identifier
    12      1     extended header format (0x01 = FlatBuffers)
    13      3     extended header length (24-bit)
    16      H     extended header
    16+H    P     payload

:func:`encode_frame` writes a :class:`Frame`; :class:`FrameDecoder` is fed arbitrary chunks
of a byte stream and returns whole frames, plus a :class:`DiscardedFrame` for each frame
the spec says to discard; :class:`ResponseAssembler` joins response sequences per stream
identifier and raises :class:`SBPSystemError` for a system-error frame::

    decoder, assembler = FrameDecoder(), ResponseAssembler()
    sock.sendall(encode_frame(Frame(Opcode.PING, stream_id=1, payload=b"hi")))
    while data := sock.recv(65536):
        for event in decoder.feed(data):
            if isinstance(event, DiscardedFrame):
                log.warning("discarded %s", event)
            elif event.is_response and (response := assembler.add(event)):
                handle(response)
    decoder.close()  # TruncatedFrameError if the peer stopped inside a frame

Choices made where the spec is silent or contradicts itself:

* **Field widths.** The spec gives 32 bits to the length and the stream identifier and 16
  to the opcode, and says the fixed header is 12 octets, which leaves one octet each to
  the magic code and the flags. ``Frame Length = 16 + Header.length + Payload.length`` then
  leaves one octet to the extended header's format field (12 + 1 + 3 = 16).
* **The frame length counts the whole frame, its own four octets included**, since the
  fixed header (12) and the format and length fields (4) make the 16 of the formula, and
  the spec defines nothing after the payload. Beware: at least one implementation in the
  wild (an elastic-stream Java SDK) writes the same length value but counts a 4-octet
  CRC-32 of the payload, appended after it, instead of the length field, so its frames
  are 4 octets longer on the wire. v0.1 says nothing of a CRC; this package does not
  speak that variant.
* **Unsigned lengths, signed stream identifiers.** The frame length is read as unsigned,
  but a frame above ``2**31 - 1`` octets is never accepted (``max_frame_size`` cannot be
  set higher), so a peer that reads it as signed agrees. The stream identifier is a signed
  32-bit integer ("the client must set this stream id to a non-negative value"):
  :func:`encode_frame` refuses a negative one on a request frame; decoding accepts any.
* **Framing errors are fatal, the spec's discards are not.** A length below 16 or above
  ``max_frame_size`` means the stream cannot be framed any more: the decoder raises
  :class:`MalformedFrameError` or :class:`FrameTooLargeError` and is unusable afterwards.
  Checks run in this order: length rule (fatal), magic (discard), opcode (discard), then
  an extended header length that overruns the frame (fatal, :class:`MalformedFrameError`,
  although the frame boundary is known: the peer speaks SBP and encodes nonsense). A
  frame with a wrong magic is skipped by its length field, which the size limit bounds.
* **Bounds.** The spec sets no maximum frame size; the default is 16 MiB (the largest
  extended header is 16 MiB - 1), settable up to ``2**31 - 1``. When :meth:`FrameDecoder.feed`
  raises, the frames it had decoded before the error travel in the error's ``events``.
* **Opcodes follow the table**, which gives 0x2004 to CRATE_RANGE (spelt
  :attr:`Opcode.CREATE_RANGE` here, with ``CRATE_RANGE`` kept as an alias) and 0x2005 to
  DESCRIBE_RANGE, where the prose calls 0x2004 DESCRIBE_RANGES.
* **Flags.** Unused bits are kept as received (a decoded frame re-encodes to the same
  bytes) and ignored. The response-end and system-error flags mean something only on a
  response frame. An unknown extended header format is not a reason to discard: the
  extended header is opaque here.
* **Response sequences.** A sequence is the response frames of one stream identifier up
  to the first one with the response-end flag. All its frames must carry the same opcode.
  A frame with the system-error flag ends its sequence whether or not it has the
  response-end flag (it is sent "instead of the normal response"). The frames held for
  unfinished sequences are bounded by ``max_pending_bytes`` (each counting its length
  plus ``FRAME_OVERHEAD``, each sequence ``SEQUENCE_OVERHEAD`` more: what they cost in
  memory), and the stream identifiers tracked by ``max_pending_sequences``.

Errors derive from :class:`SBPError`, a :class:`~liftbridge_sync.errors.LiftbridgeError`::

    SBPError
    ├── InvalidFrameError (ValueError)   a Frame field is out of range, or cannot be sent
    ├── FramingError                     the byte stream cannot be framed
    │   ├── FrameTooLargeError           frame length above the maximum frame size
    │   ├── MalformedFrameError          length below 16, or header past the frame end
    │   └── TruncatedFrameError          the stream ended inside a frame
    ├── ResponseSequenceError            a frame does not fit its response sequence
    │   └── ResponseTooLargeError        unfinished responses over a max_pending_* bound
    └── SBPSystemError                   the peer answered with a system-error frame

An argument of the wrong type (data that is not bytes-like, a ``max_frame_size`` that is
not an int, something other than a :class:`Frame` given to the assembler) raises
:class:`~liftbridge_sync.errors.ArgumentTypeError`, one out of range
:class:`~liftbridge_sync.errors.ConfigurationError` (also a ``TypeError`` and a
``ValueError``), as everywhere in the library.

Frames, responses, reports and errors are immutable and safe to share between threads;
a :class:`FrameDecoder` or :class:`ResponseAssembler` belongs to one thread at a time.
"""

from __future__ import annotations

from liftbridge_sync.sbp._assembler import (
    DEFAULT_MAX_PENDING_BYTES,
    DEFAULT_MAX_PENDING_SEQUENCES,
    FRAME_OVERHEAD,
    SEQUENCE_OVERHEAD,
    Response,
    ResponseAssembler,
)
from liftbridge_sync.sbp._decoder import FrameDecoder, decode_frame
from liftbridge_sync.sbp._errors import (
    FrameTooLargeError,
    FramingError,
    InvalidFrameError,
    MalformedFrameError,
    ResponseSequenceError,
    ResponseTooLargeError,
    SBPError,
    SBPSystemError,
    TruncatedFrameError,
)
from liftbridge_sync.sbp._frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FIXED_HEADER_SIZE,
    MAGIC,
    MAX_FRAME_SIZE_LIMIT,
    MAX_HEADER_LENGTH,
    MIN_FRAME_SIZE,
    DiscardedFrame,
    DiscardReason,
    Flags,
    Frame,
    HeaderFormat,
    Opcode,
    encode_frame,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_PENDING_BYTES",
    "DEFAULT_MAX_PENDING_SEQUENCES",
    "FIXED_HEADER_SIZE",
    "FRAME_OVERHEAD",
    "MAGIC",
    "MAX_FRAME_SIZE_LIMIT",
    "MAX_HEADER_LENGTH",
    "MIN_FRAME_SIZE",
    "DiscardReason",
    "DiscardedFrame",
    "Flags",
    "Frame",
    "FrameDecoder",
    "FrameTooLargeError",
    "FramingError",
    "HeaderFormat",
    "InvalidFrameError",
    "MalformedFrameError",
    "Opcode",
    "Response",
    "ResponseAssembler",
    "ResponseSequenceError",
    "ResponseTooLargeError",
    "SBPError",
    "SBPSystemError",
    "SEQUENCE_OVERHEAD",
    "TruncatedFrameError",
    "decode_frame",
    "encode_frame",
]
