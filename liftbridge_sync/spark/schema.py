"""The ``liftbridge`` data source's read schema, as DDL.

Its own module, importing nothing: Spark asks for the schema in a Python worker of its
own, which then loads no client, no gRPC and no Arrow (a worker Spark starts afresh,
as it does after a minute idle, pays every import of the modules it unpickles).
Constants and a pure function: thread-safe.
"""

from __future__ import annotations

__all__ = ["HEADERS_DDL", "schema_ddl"]

#: The ``headers`` column of ``includeHeaders=true``, shaped as the Kafka connector's.
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

_BASE_DDL = (
    "key binary, value binary, stream string, partition int, offset long, "
    "timestamp timestamp, timestampType int, subject string, replySubject string, "
    "correlationId string"
)


def schema_ddl(include_headers: bool) -> str:
    """The source schema as DDL; with includeHeaders also Kafka's
    ``headers array<struct<key:string,value:binary>>``."""
    return _BASE_DDL + (f", {HEADERS_DDL}" if include_headers else "")
