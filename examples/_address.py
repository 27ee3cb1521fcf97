"""Where the examples find a server: argv[1], $LIFTBRIDGE_ADDRESS, or 127.0.0.1:9292.

Start one with ``python -m liftbridge_sync.testing serve --port 9292``.
"""

from __future__ import annotations

import os
import sys


def server_address() -> str:
    """The Liftbridge address to use."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("LIFTBRIDGE_ADDRESS", "127.0.0.1:9292")
