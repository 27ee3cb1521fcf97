"""Loading the optional C extension ``liftbridge_sync._speedups``, once, for everyone.

:data:`MODULE` is the loaded extension, or ``None`` when it is not built, does not load,
or ``LIFTBRIDGE_SYNC_NO_SPEEDUPS`` is set to anything but ``""``/``"0"`` at import time;
:data:`INACTIVE_REASON` says why. It imports nothing of the package, so that the value
models (whose ``Ack`` derives from the extension's ``AckCore``) and
:mod:`liftbridge_sync._wire.speedups` (which wires up the rest) can both ask it.

Thread-safe: both are set once, at import.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

__all__ = ["INACTIVE_REASON", "MODULE"]

MODULE: ModuleType | None = None
#: Why :data:`MODULE` is ``None`` (``""`` when it is loaded).
INACTIVE_REASON = ""

if os.environ.get("LIFTBRIDGE_SYNC_NO_SPEEDUPS", "") not in ("", "0"):
    INACTIVE_REASON = "disabled by LIFTBRIDGE_SYNC_NO_SPEEDUPS"
else:
    try:
        MODULE = importlib.import_module("liftbridge_sync._speedups")
    except ImportError as exc:
        if importlib.util.find_spec("liftbridge_sync._speedups") is None:
            INACTIVE_REASON = "extension not built (installed from source without a C compiler)"
        else:  # built, but it does not load (e.g. built for another interpreter)
            INACTIVE_REASON = f"extension does not load: {exc}"
