"""The transport layer: channels, metadata, routed and retried RPCs, publish streams.

* :mod:`.channels`: one gRPC channel per broker (:class:`ChannelPool`).
* :mod:`.tls`: the client's one TLS set-up (roots, ``ssl`` context, grpc credentials).
* :mod:`.metadata`: the cluster metadata cache.
* :mod:`.retry`: the tenacity seam (every retry loop goes through it).
* :mod:`.core`: :class:`ClientCore`, broker selection, leader routing and deadlines.
* :mod:`.publish_stream`: the ``PublishAsync`` stream seam and its grpcio opener.
* :mod:`.h2`: the same stream over our own HTTP/2 framing (the default).
* :mod:`.opening`: the seam: publish streams and subscribe calls of either transport,
  failing with Liftbridge errors (nothing above it imports grpc).
"""
