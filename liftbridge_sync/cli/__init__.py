"""The ``liftbridge-sync`` command line (extra ``cli``: click and rich).

Run ``liftbridge-sync --help`` or ``python -m liftbridge_sync --help``. Importing
:mod:`liftbridge_sync` never imports this package.
"""

from __future__ import annotations

from liftbridge_sync.cli.main import main

__all__ = ["main"]
