"""The ``"h2"`` publish transport: ``PublishAsync`` over our own HTTP/2 connection.

Also the receive side of the ``Subscribe`` reader, whose connection is
:mod:`liftbridge_sync._transport.h2_subscribe`. Modules, none with shared state:

* :mod:`.framing`: frames, gRPC length-prefixed messages and status tables as bytes (no
  I/O, no state);
* :mod:`.responses`: received bytes to responses and the stream's end;
* :mod:`.connection`: the socket, the I/O thread, reads, keepalive;
* :mod:`.writing`: requests queued by callers, framed and written (flow control);
* :mod:`.dial`: TCP, TLS with ALPN, the preface and the request headers;
* :mod:`.limits`: what a broker may make the connections hold (receive limit, output
  cap, floods);
* :mod:`.stalls`: noticing a publish connection's broker that stopped answering;
* :mod:`.subscribe_receiver`: a Subscribe call's received bytes to wire messages and the
  stream's end (no I/O).
"""
