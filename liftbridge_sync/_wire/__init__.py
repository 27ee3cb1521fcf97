"""The wire layer: pure functions between Python arguments and protobuf messages.

Nothing here does I/O or starts threads: argument validation (:mod:`.validate`), request
building (:mod:`.requests`), gRPC status mapping (:mod:`.status`) and cursor routing
(:mod:`.cursors`). Depends only on the public value modules (errors, models, options).
"""
