"""The ``"h2"`` publish transport: ``PublishAsync`` over our own HTTP/2 connection.

Also the receive side of the ``Subscribe`` reader, whose connection is
:mod:`liftbridge_sync._transport.h2_subscribe`. Modules, none with shared state:

* :mod:`.framing`: frames, gRPC length-prefixed messages and status tables as bytes (no
  I/O, no state);
* :mod:`.dispatch`: the one inbound event dispatch of a stream, publish and subscribe
  alike (frames, limits, control frames, h2's events, flow control, the stream's end);
* :mod:`.responses`: the publish direction's codec: received bytes to responses;
* :mod:`.connection`: the socket, the I/O thread, reads, keepalive; its stream composes
  the next two;
* :mod:`.writing`: requests queued by callers, framed and written (flow control);
* :mod:`.reading`: a ``publish()`` caller reading its own ack while the I/O thread
  steps aside;
* :mod:`.dial`: TCP, TLS with ALPN, the preface and the request headers;
* :mod:`.limits`: what a broker may make the connections hold (receive limit, output
  cap, floods);
* :mod:`.stalls`: noticing a publish connection's broker that stopped answering;
* :mod:`.subscribe_receiver`: the Subscribe direction's codec: a call's received bytes
  to wire messages and the call's end (no I/O).
"""
