"""A Flask app that publishes request bodies to a Liftbridge stream.

Run it under gunicorn (each worker process gets its own client)::

    export LIFTBRIDGE_ADDRESSES=127.0.0.1:9292 EXAMPLE_STREAM=orders
    gunicorn --chdir examples -w 4 flask_app:app                  # sync workers
    gunicorn --chdir examples -k gthread --threads 8 flask_app:app
    curl -X POST --data 'hello' 'http://127.0.0.1:8000/messages?key=user-1'

``POST /messages`` waits for the ack and returns where the message went;
``POST /messages/async`` returns 202 at once (the worker flushes at exit).
"""

from __future__ import annotations

import os

from flask import Flask, request

from liftbridge_sync import ByKey
from liftbridge_sync.flask import Liftbridge

STREAM = os.environ.get("EXAMPLE_STREAM", "flask-example")

app = Flask(__name__)
app.config["LIFTBRIDGE_ADDRESSES"] = os.environ.get("LIFTBRIDGE_ADDRESSES", "127.0.0.1:9292")
app.config["LIFTBRIDGE_ACK_TIMEOUT"] = 10.0
liftbridge = Liftbridge(app)
partitioner = ByKey()

# Runs once per process that imports the app: in gunicorn's master with --preload,
# which then forks workers that each get a client of their own.
with app.app_context():
    liftbridge.client.create_stream(STREAM, STREAM, partitions=2, exist_ok=True)


@app.get("/healthz")
def healthz() -> dict[str, object]:
    """Liveness, and which process answered."""
    return {"pid": os.getpid()}


@app.post("/messages")
def publish() -> dict[str, object]:
    """Publish the request body, keyed by ``?key=``; answer with the ack."""
    key = request.args.get("key", "").encode() or None
    client = liftbridge.client
    ack = client.publish(STREAM, request.get_data(), key=key, partitioner=partitioner)
    assert ack is not None
    return {
        "partition": ack.partition,
        "offset": ack.offset,
        "pid": os.getpid(),
        "client": id(client),
    }


@app.post("/messages/async")
def publish_later() -> tuple[dict[str, object], int]:
    """Publish the request body without waiting for the ack."""
    liftbridge.client.publish_async(STREAM, request.get_data(), partition=0)
    return {"pid": os.getpid()}, 202
