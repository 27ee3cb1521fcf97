"""Command line: ``python -m liftbridge_sync.testing install|serve``.

* ``install [--target T]``: build (or find) the server binary; print its path and version.
* ``serve [--port N] [--nats-port N] [--cursors-partitions N] [--log-level L]``: run a
  loopback server in the foreground until Ctrl-C or SIGTERM (exit 0). Ports are
  1-65535, ``--cursors-partitions`` 0 or more, ``--log-level`` one of the server's
  levels (checked before anything starts, exit 2). A server that fails to start exits
  1, keeping its temporary directory (log and config) and naming it.

Ctrl-C or SIGTERM during a build (the first ``install`` or ``serve``) stops the ``go``
build at once and exits 130 or 143.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

__all__ = ["main"]


class _Terminated(BaseException):
    """SIGTERM before the server runs (a ``BaseException``, as ``KeyboardInterrupt``)."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated()


#: The server's ``logging.level`` values (logrus, as its ``--level`` flag documents).
_LOG_LEVELS = ("debug", "info", "warn", "error")


def _bounded_int(low: int, high: int | None) -> Callable[[str], int]:
    """An argparse type: an int in ``[low, high]`` (``high`` None: no upper bound), so a
    bad value is a usage error here rather than a Go panic of the server."""
    span = f"from {low} to {high}" if high is not None else f"{low} or more"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range ({span})")
        return value

    return convert


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m liftbridge_sync.testing",
        description="Build and run a Liftbridge server for development and tests.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    install = commands.add_parser("install", help="build or find the server binary")
    install.add_argument(
        "--target",
        default="auto",
        help="auto (default; LIFTBRIDGE_SERVER_VERSION overrides), pinned or v1.9.0",
    )

    serve = commands.add_parser("serve", help="run a loopback server in the foreground")
    port = _bounded_int(1, 65535)
    serve.add_argument("--port", type=port, default=None, help="gRPC port (default: free)")
    serve.add_argument("--nats-port", type=port, default=None, help="NATS port (default: free)")
    serve.add_argument(
        "--cursors-partitions",
        type=_bounded_int(0, None),
        default=2,
        help="cursors.stream.partitions (2; 0 disables cursors and consumer groups)",
    )
    serve.add_argument("--target", default="auto", help="server build to use (see install)")
    serve.add_argument(
        "--log-level", default="info", choices=_LOG_LEVELS, help="server logging.level (info)"
    )
    return parser


def _install(args: argparse.Namespace) -> int:
    from liftbridge_sync.testing._install import ServerInstallError, install_server

    try:
        installed = install_server(args.target)
    except (ServerInstallError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(installed.path)
    print(f"version {installed.version} (target {installed.target})")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from liftbridge_sync.testing._install import ServerInstallError, install_server
    from liftbridge_sync.testing._process import ServerStartError
    from liftbridge_sync.testing._server import LiftbridgeServer

    try:
        # The first run builds the server (minutes of `go install`): Ctrl-C and SIGTERM
        # end the build (main() reports them), they are not noted for after it.
        installed = install_server(args.target)
    except (ServerInstallError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # From here a signal stops the server through the loop below.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = LiftbridgeServer(
            installed=installed,
            port=args.port,
            nats_port=args.nats_port,
            cursors_partitions=args.cursors_partitions,
            log_level=args.log_level,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        server.start()
    except ServerStartError as exc:
        # Its process is gone (start() kills it); the directory is kept, as the error
        # names the log in it, and the whole log and config may say more than the tail.
        print(f"error: {exc}", file=sys.stderr)
        print(
            f"the server's directory (log, config, data) is kept: {server.run_dir}\n"
            "  delete it when done",
            file=sys.stderr,
        )
        return 1
    try:
        print(
            f"Liftbridge {installed.version} ready at {server.address} (NATS {server.nats_url})",
            flush=True,
        )
        print(
            # LIFTBRIDGE_ADDRESSES for the liftbridge-sync command line,
            # LIFTBRIDGE_ADDRESS for the pytest plugin's external-server mode.
            f"  export LIFTBRIDGE_ADDRESSES={server.address} LIFTBRIDGE_ADDRESS={server.address}"
            f" LIFTBRIDGE_NATS_URL={server.nats_url}\n"
            f"  then run pytest, or connect with liftbridge_sync.Client(['{server.address}']).\n"
            f"  log: {server.log_path}\n"
            "  Press Ctrl-C to stop.",
            flush=True,
        )
        while not stop.wait(0.5):
            if not server.running:
                print(
                    f"error: the server exited unexpectedly:\n{server.log_tail(20)}",
                    file=sys.stderr,
                )
                return 1
        print("stopping...", flush=True)
        return 0
    finally:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # Until serve's server runs, Ctrl-C and SIGTERM raise: out of a build's
    # subprocess.run the exception kills `go`, and no fallback build follows. SIGTERM's
    # default action would leave `go` building on, orphaned.
    previous = {
        signum: signal.signal(signum, handler)
        for signum, handler in (
            (signal.SIGINT, signal.default_int_handler),
            (signal.SIGTERM, _raise_terminated),
        )
    }
    try:
        if args.command == "install":
            return _install(args)
        return _serve(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("terminated", file=sys.stderr)
        return 143
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
