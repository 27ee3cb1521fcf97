"""``liftbridge-sync`` and ``python -m liftbridge_sync``: the command line (extra ``cli``).

The console script points here rather than at :mod:`liftbridge_sync.cli` so that,
without the ``cli`` extra (click and rich), the command prints what to install instead
of an ``ImportError`` traceback.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    """Run the command line on ``sys.argv[1:]``; return the exit code.

    Without the ``cli`` extra: one line on stderr naming ``pip install
    'liftbridge-sync[cli]'``, exit code 1. Ctrl-C while the command line loads: exit
    code 130 as during a command (not so while ``liftbridge_sync`` itself is imported,
    before this runs: Python's traceback then).

    Not thread-safe: run it from the main thread of a process.
    """
    try:
        from liftbridge_sync.cli import main as cli_main
    except KeyboardInterrupt:
        # Ctrl-C while the commands and click load (a tenth of a second of every
        # start): the user's choice, as it is during a command, not a traceback.
        print("liftbridge-sync: interrupted", file=sys.stderr)
        return 130
    except ImportError as exc:
        if exc.name not in ("click", "rich") and not (exc.name or "").startswith(
            ("click.", "rich.")
        ):
            raise  # a broken install, not a missing extra: show it
        print(
            f"liftbridge-sync: the command line needs the 'cli' extra ({exc.name} is "
            "missing): pip install 'liftbridge-sync[cli]'",
            file=sys.stderr,
        )
        return 1
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
