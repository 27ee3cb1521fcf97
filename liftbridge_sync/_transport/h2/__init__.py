"""The ``"h2"`` publish transport: ``PublishAsync`` over our own HTTP/2 connection.

* :mod:`.framing`: frames, gRPC length-prefixed messages and status tables as bytes (no
  I/O, no state);
* :mod:`.connection`: the socket (TLS and ALPN), the I/O thread, flow control,
  keepalive and the one stream.
"""
