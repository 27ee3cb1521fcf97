"""``manage.py liftbridge_tail STREAM``: print a stream with the project's settings."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from liftbridge_sync import LiftbridgeError, StreamSubscription, Subscription
from liftbridge_sync.django.client import get_client
from liftbridge_sync.tail import (
    FORMATS,
    START_HELP,
    STOP_HELP,
    format_message,
    parse_start,
    parse_stop,
)


class Command(BaseCommand):
    """Print messages of a stream, from a start to a stop position or forever.

    Not thread-safe: Django runs it once per process.
    """

    help = "Print messages of a Liftbridge stream (settings.LIFTBRIDGE)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the command's arguments."""
        parser.add_argument("stream")
        parser.add_argument("-P", "--partition", type=int, help="one partition (default: all)")
        parser.add_argument("-s", "--start", help=START_HELP)
        parser.add_argument("-e", "--stop", help=STOP_HELP)
        parser.add_argument("-F", "--follow", action="store_true", help="wait for new messages")
        parser.add_argument("-n", "--count", type=int, help="exit after COUNT messages")
        parser.add_argument("-o", "--output", choices=FORMATS, default="plain")

    def handle(self, *args: Any, **options: Any) -> None:
        """Read and print the messages."""
        if options["follow"] and options["stop"]:
            raise CommandError("give --follow or --stop, not both")
        if options["count"] is not None and options["count"] < 1:
            # The count is checked after a message is printed: 0 would print one.
            raise CommandError(f"--count must be at least 1, got {options['count']}")
        try:
            self._tail(options)
        except LiftbridgeError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            sys.exit(130)
        except BrokenPipeError:
            # The reader went away (``| head``): send the rest, and the final flush,
            # to /dev/null instead of printing a traceback.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    def _tail(self, options: dict[str, Any]) -> None:
        follow: bool = options["follow"]
        start = parse_start(options["start"] or ("new" if follow else "earliest"))
        stop = None if follow else parse_stop(options["stop"] or "latest")
        client = get_client()
        sub: Subscription | StreamSubscription
        if options["partition"] is None:
            sub = client.subscribe_stream(options["stream"], start=start, stop=stop)
        else:
            sub = client.subscribe(
                options["stream"], partition=options["partition"], start=start, stop=stop
            )
        out = sys.stdout.buffer
        seen = 0
        with sub:
            for message in sub:
                out.write(format_message(message, options["output"]))
                if follow:
                    out.flush()
                seen += 1
                if options["count"] is not None and seen >= options["count"]:
                    break
        out.flush()
