"""``python -m bench publish|subscribe|profile|all``: see bench/README.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from bench import _fuzz, _profile, _publish, _subscribe

    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks: liftbridge_sync vs go-liftbridge v2.4.0 vs gufo-liftbridge.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (
        ("publish", "publish throughput, ack latency and CPU per message"),
        ("subscribe", "catch-up subscribe throughput"),
        ("all", "publish, subscribe and profile"),
    ):
        sub = commands.add_parser(name, help=helptext)
        _common_arguments(sub)
        if name in ("publish", "all"):
            _publish.add_arguments(sub)
        if name in ("subscribe", "all"):
            _subscribe.add_arguments(sub)
        if name == "all":
            _profile.add_arguments(sub)
    fuzz = commands.add_parser("fuzz", help="feed generated inputs to the byte decoders")
    _fuzz.add_arguments(fuzz)
    report = commands.add_parser("report", help="re-render the tables of a --json file")
    report.add_argument("file", help="a file written by --json")
    prof = commands.add_parser("profile", help="cProfile our pipelined publish (or subscribe)")
    prof.add_argument("--servers", default=None, help="existing server (default: start one)")
    prof.add_argument("--server-target", default="auto", help="harness server build (auto)")
    prof.add_argument("--message-size", type=int, default=256)
    _profile.add_arguments(prof)
    prof.add_argument("what", nargs="?", choices=("publish", "subscribe"), default="publish")
    return parser


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--servers", default=None, help="existing server (default: start one)")
    parser.add_argument("--server-target", default="auto", help="harness server build (auto)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (5)")
    parser.add_argument(
        "--warmup-messages", type=int, default=2000, help="messages per warm-up run (2000)"
    )
    parser.add_argument("--message-size", type=int, default=256, help="payload bytes (256)")
    parser.add_argument(
        "--clients",
        default="go,ours,ours-grpc,ours-batch,gufo",
        help="comma-separated subset of go,ours,ours-grpc,ours-h2,ours-batch,gufo "
        "(ours = the default Client([addr]); ours-grpc/ours-h2 force a publish transport; "
        "ours-batch = publish_batch)",
    )
    parser.add_argument("--json", default=None, help="also write all records to this file")


def _prepare(clients: tuple[str, ...]) -> dict[str, Any]:
    from bench import _go, _gufo

    extra: dict[str, Any] = {}
    if "go" in clients:
        _go.build()
        extra["go"] = _go.go_version()
        extra["go_liftbridge"] = _go.go_liftbridge_version()
    if "gufo" in clients:
        _gufo.ensure_venv()
        extra["gufo"] = _gufo.versions()
    return extra


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    from bench import _env, _profile, _publish, _subscribe
    from bench._runner import CLIENTS
    from bench._server import bench_server

    args = _parser().parse_args(argv)
    if args.command == "fuzz":
        from bench import _fuzz

        return _fuzz.main(args)
    if args.command == "report":
        from bench._report import tables_from_json

        print("\n\n".join(tables_from_json(json.loads(Path(args.file).read_text()))))
        return 0
    if args.command == "profile":
        with bench_server(args.servers, args.server_target) as server:
            print(_profile.run(args, server))
        return 0
    clients = tuple(c.strip() for c in args.clients.split(",") if c.strip())
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        print(f"unknown clients: {sorted(unknown)}", file=sys.stderr)
        return 2
    began = time.monotonic()
    extra = _prepare(clients)
    with bench_server(args.servers, args.server_target) as server:
        meta = _env.environment({**extra, "server_version": server.version, "argv": sys.argv})
        records = []
        tables = []
        if args.command in ("publish", "all"):
            recs, tabs = _publish.run(args, server, clients)
            records += recs
            tables += tabs
        if args.command in ("subscribe", "all"):
            recs, tabs = _subscribe.run(args, server, clients)
            records += recs
            tables += tabs
        profile_text = _profile.run(args, server) if args.command == "all" else ""
    meta["load_average_end"] = _env.load_average()
    meta["elapsed_s"] = round(time.monotonic() - began, 1)
    print(_format_meta(meta))
    print("\n\n".join(tables))
    if profile_text:
        print("\n" + profile_text)
    if args.json:
        payload = {"meta": meta, "records": [r.as_dict() for r in records]}
        Path(args.json).write_text(json.dumps(payload, indent=1))
    return 0


def _format_meta(meta: dict[str, Any]) -> str:
    keys = [k for k in meta if k != "argv"]
    lines = ["## Environment", ""]
    lines += [f"* {k}: {meta[k]}" for k in keys]
    lines.append(f"* command: {' '.join(meta.get('argv', []))}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
