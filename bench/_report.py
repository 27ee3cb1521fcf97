"""Markdown tables: medians over rounds with min–max, and ratios to the Go client."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from bench._runner import RunRecord
from bench._stats import spread

__all__ = ["num", "scenario_table", "tables_from_json"]

_METRICS_PUBLISH = (
    ("msgs/s", "msgs_per_s"),
    ("ack p50 µs", "p50_us"),
    ("ack p99 µs", "p99_us"),
    ("client CPU µs/msg", "client_cpu_us_per_msg"),
)
_METRICS_SUBSCRIBE = (
    ("msgs/s", "msgs_per_s"),
    ("client CPU µs/msg", "client_cpu_us_per_msg"),
)


def num(value: float) -> str:
    """Compact number: thousands separators for large values, 2 significant decimals."""
    if math.isnan(value):
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(values: Sequence[float]) -> tuple[str, float]:
    s = spread(values)
    if s["n"] == 0:
        return "–", math.nan
    return f"{num(s['median'])} ({num(s['min'])}–{num(s['max'])})", s["median"]


def _ratio(value: float, base: float) -> str:
    if math.isnan(value) or math.isnan(base) or base == 0:
        return "–"
    return f"{value / base:.2f}×"


def scenario_table(
    records: Iterable[RunRecord], scenario: str, clients: Sequence[str], subscribe: bool = False
) -> str:
    """One markdown table for ``scenario``: a row per client, ratios against ``go``."""
    rows = [r for r in records if r.scenario == scenario]
    metrics = _METRICS_SUBSCRIBE if subscribe else _METRICS_PUBLISH
    header = ["client"]
    for title, _ in metrics:
        header += [title, "×Go"]
    header += ["client ctx switches/msg", "server CPU µs/msg", "runs", "errors"]
    header.insert(3, "×Go msgs/s, paired by round")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    go_medians: dict[str, float] = {}
    for attr in (attr for _, attr in metrics):
        go_medians[attr] = spread([getattr(r, attr) for r in rows if r.client == "go"])["median"]
    for client in clients:
        mine = [r for r in rows if r.client == client]
        if not mine:
            continue
        cells = [client]
        for _, attr in metrics:
            text, median = _cell([getattr(r, attr) for r in mine])
            cells += [text, _ratio(median, go_medians[attr])]
        go_by_round = {r.round: r.msgs_per_s for r in rows if r.client == "go"}
        paired = [r.msgs_per_s / go_by_round[r.round] for r in mine if r.round in go_by_round]
        ps = spread(paired)
        paired_text = f"{ps['median']:.2f}× ({ps['min']:.2f}–{ps['max']:.2f})" if ps["n"] else "–"
        cells.insert(3, paired_text)
        switches_text, _ = _cell([r.context_switches_per_msg for r in mine])
        server_text, _ = _cell([r.server_cpu_us_per_msg for r in mine])
        errors = str(sum(r.errors for r in mine))
        stalled = sum(r.stalled_windows for r in mine)
        if stalled:
            errors += f" ({stalled} stalled windows)"
        cells += [switches_text, server_text, str(len(mine)), errors]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables_from_json(payload: dict[str, Any]) -> list[str]:
    """Re-render the tables of a ``--json`` file (``python -m bench report FILE``)."""
    records = [RunRecord(**r) for r in payload["records"]]
    tables = []
    for bench in ("publish", "subscribe"):
        scenarios = list(dict.fromkeys(r.scenario for r in records if r.bench == bench))
        for scenario in scenarios:
            mine = [r for r in records if r.bench == bench and r.scenario == scenario]
            clients = list(dict.fromkeys(r.client for r in sorted(mine, key=_client_order)))
            messages = mine[0].messages
            title = f"### {bench} {scenario}: {messages:,} messages"
            tables.append(
                title + "\n\n" + scenario_table(mine, scenario, clients, bench == "subscribe")
            )
    return tables


def _client_order(record: RunRecord) -> int:
    order = ("go", "ours", "ours-h2", "gufo")
    return order.index(record.client) if record.client in order else len(order)
