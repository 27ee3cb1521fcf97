"""An HTTP/2 client connection with stream 1 open, for tests of the h2 readers."""

from __future__ import annotations

import h2.config
import h2.connection


def open_stream() -> tuple[h2.connection.H2Connection, h2.connection.H2Connection, bytes]:
    """A client with stream 1 open (a gRPC request), the server that answered it, and
    the server's bytes of that answer (its SETTINGS and the response headers)."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    request = [(":method", "POST"), (":path", "/p"), (":scheme", "http"), (":authority", "x")]
    client.send_headers(1, request)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
    return client, server, server.data_to_send()
