"""The wire layer: pure functions between Python arguments and protobuf messages.

Nothing here does I/O or starts threads: argument validation (:mod:`.validate`), request
building (:mod:`.requests`), the ``PublishAsync`` bytes both ways (:mod:`.publish_codec`,
with the optional C speedups loaded by :mod:`.speedups`), gRPC status mapping
(:mod:`.status`) and cursor routing (:mod:`.cursors`). Depends only on the public value
modules (errors, models, options).
"""
