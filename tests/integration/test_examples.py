"""Every example runs against a real server and prints what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
README = EXAMPLES.parent / "README.md"


def run_example(name: str, address: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), address],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_quickstart(liftbridge_address: str) -> None:
    out = run_example("quickstart.py", liftbridge_address)
    assert "published at offset 0" in out
    assert "read offset=0 key=b'greeting' value=b'hello, liftbridge'" in out


def test_publish_async(liftbridge_address: str) -> None:
    out = run_example("publish_async.py", liftbridge_address)
    assert "acked 1000 messages" in out
    assert "failed" not in out


def test_subscribe(liftbridge_address: str) -> None:
    out = run_example("subscribe.py", liftbridge_address)
    assert "partition 0: ['event 0', 'event 2', 'event 4']" in out
    assert out.count("  p") == 6
    assert "latest on partition 1: event 5" in out
    assert "no new messages within 0.5 s" in out


def test_cursors(liftbridge_address: str) -> None:
    out = run_example("cursors.py", liftbridge_address)
    assert "first run: ['invoice 0', 'invoice 1', 'invoice 2']" in out
    assert "cursor now: 2" in out
    assert "second run (resumes after the cursor): ['invoice 3', 'invoice 4']" in out


def test_demo_starts_its_own_server() -> None:
    out = run_example("demo.py", "unused")
    assert "Published 10 messages" in out
    assert out.count("batch=demo") == 10
    assert out.rstrip().endswith("Done.")


def test_consumer_group(liftbridge_address: str) -> None:
    out = run_example("consumer_group.py", liftbridge_address)
    assert "consumed: ['order 0', 'order 1', 'order 2', 'order 3']" in out
    assert "cursor of partition 1: 1" in out
    assert "activity: ['created" in out and "True joined" in out


def test_observability(liftbridge_address: str) -> None:
    out = run_example("observability.py", liftbridge_address)
    assert f"healthy: {liftbridge_address} answered" in out
    assert "lag after one message: 2" in out
    spans = [line.split() for line in out.splitlines() if line.startswith("span ")]
    sends = [s for s in spans if s[1].startswith("'send")]
    processes = [s for s in spans if s[1].startswith("'process")]
    assert len(sends) == 3 and len(processes) == 3
    # Each process span is the child of a send span, in the same trace.
    send_ids = {s[-2].split("=")[1]: s[-3].split("=")[1] for s in sends}
    for span in processes:
        parent = span[-1].split("=")[1]
        assert parent in send_ids and send_ids[parent] == span[-3].split("=")[1]
    assert "messaging.client.sent.messages" in out
    assert "messaging.liftbridge.consumer.lag" in out


def readme_snippet(opening: str) -> str:
    """The README's one ```python block whose code starts with ``opening``."""
    blocks: list[str] = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.M | re.S)
    found = [block for block in blocks if block.startswith(opening)]
    assert len(found) == 1, f"{len(found)} README python blocks start with {opening!r}"
    return found[0]


def run_snippet(code: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_readme_opening_snippet(liftbridge_address: str, tmp_path: Path) -> None:
    """The README's first example runs as written (its address and stream name swapped)."""
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    code = readme_snippet("from liftbridge_sync import ByKey, Client, StartAt, StopAt\n")
    code = code.replace('"localhost:9292"', repr(liftbridge_address))
    code = code.replace('"orders"', repr(stream))
    code += f"\nwith Client([{liftbridge_address!r}]) as c:\n    c.delete_stream({stream!r})\n"
    lines = run_snippet(code, tmp_path).splitlines()
    # The ack, then partition 0 from the earliest to the latest offset: 1 + 1,000.
    assert len(lines) == 1 + 1 + 1000
    assert lines[-1].startswith("1000 None b'order #999' {")


def test_readme_option_snippets_build_clients(tmp_path: Path) -> None:
    """The option, TLS and address-translation examples build clients (no broker needed:
    clients connect on first use), so every option name and value in them is valid."""
    for name in ("ca.pem", "client.pem", "client.key", "client-key.pem"):
        (tmp_path / name).write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    prelude = "from liftbridge_sync import Client\n"
    for opening in (
        "from liftbridge_sync import Client, ClientOptions, RetryPolicy, TLSOptions\n",
        "from liftbridge_sync import Client, TLSError, TLSOptions\n",
        "def translate(advertised: str) -> str:",
    ):
        run_snippet(prelude + readme_snippet(opening), tmp_path)


def test_readme_tls_test_kit_snippet(tmp_path: Path) -> None:
    """The test kit's TLS and ACL example starts its server and connects as alice."""
    code = "from pathlib import Path\nfrom liftbridge_sync import Client\n"
    code += f"tmp_path = Path({str(tmp_path)!r})\n"
    code += readme_snippet("from liftbridge_sync.testing import LiftbridgeServer")
    code += "    print(client.fetch_metadata().brokers[0].id)\n    client.close()\n"
    assert run_snippet(code, tmp_path).strip()


def test_readme_self_contained_snippets(tmp_path: Path) -> None:
    """The SBP codec and FakeBroker examples run as written."""
    run_snippet(readme_snippet("from liftbridge_sync.sbp import"), tmp_path)
    run_snippet(readme_snippet("from liftbridge_sync import Client, StartAt\n"), tmp_path)
