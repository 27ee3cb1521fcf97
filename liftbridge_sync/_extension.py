"""Loading the optional C extension ``liftbridge_sync._speedups``, once, for everyone.

:data:`MODULE` is the loaded extension, or ``None`` when it is not built, does not load,
or ``LIFTBRIDGE_SYNC_NO_SPEEDUPS`` disables it at import time (see :func:`disabled_by`);
:data:`INACTIVE_REASON` says why. It imports nothing of the package, so that the value
models (whose ``Ack`` derives from the extension's ``AckCore``) and
:mod:`liftbridge_sync._wire.speedups` (which wires up the rest) can both ask it.

Thread-safe: both are set once, at import.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from types import ModuleType

__all__ = ["INACTIVE_REASON", "MODULE", "disabled_by"]

_KEEP = frozenset({"", "0", "false", "no", "off"})
_DISABLE = frozenset({"1", "true", "yes", "on"})


def disabled_by(value: str) -> bool:
    """Whether ``LIFTBRIDGE_SYNC_NO_SPEEDUPS=value`` turns the C speedups off.

    ``1``/``true``/``yes``/``on`` do, ``0``/``false``/``no``/``off`` and an empty
    value do not (any case, spaces around ignored). Any other value does, with a
    ``RuntimeWarning``: it was set for a reason, but not one this can read.

    Thread-safe: a pure function.
    """
    word = value.strip().lower()
    if word in _KEEP:
        return False
    if word not in _DISABLE:
        warnings.warn(
            f"LIFTBRIDGE_SYNC_NO_SPEEDUPS={value!r} is not one of 1/true/yes/on or "
            "0/false/no/off: taken as 1, the C speedups are off",
            RuntimeWarning,
            stacklevel=2,
        )
    return True


MODULE: ModuleType | None = None
#: Why :data:`MODULE` is ``None`` (``""`` when it is loaded).
INACTIVE_REASON = ""

if disabled_by(os.environ.get("LIFTBRIDGE_SYNC_NO_SPEEDUPS", "")):
    INACTIVE_REASON = "disabled by LIFTBRIDGE_SYNC_NO_SPEEDUPS"
else:
    try:
        MODULE = importlib.import_module("liftbridge_sync._speedups")
    except ImportError as exc:
        if importlib.util.find_spec("liftbridge_sync._speedups") is None:
            INACTIVE_REASON = "extension not built (installed from source without a C compiler)"
        else:  # built, but it does not load (e.g. built for another interpreter)
            INACTIVE_REASON = f"extension does not load: {exc}"
