"""``python -m liftbridge_sync``: the ``liftbridge-sync`` command line (extra ``cli``)."""

from __future__ import annotations

import sys


def _run() -> int:
    try:
        from liftbridge_sync.cli import main
    except ImportError as exc:  # the cli extra is not installed
        print(
            f"liftbridge-sync: the command line needs the 'cli' extra ({exc.name} is missing): "
            "pip install 'liftbridge-sync[cli]'",
            file=sys.stderr,
        )
        return 2
    return main()


if __name__ == "__main__":
    sys.exit(_run())
