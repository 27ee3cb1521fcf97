"""examples/django_project: system checks, liftbridge_tail, and a real gunicorn."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from liftbridge_sync import Client
from tests.waiting import interrupt
from tests.web.drive import drive_and_check
from tests.web.gunicorn import ROOT

pytestmark = pytest.mark.integration

PROJECT = ROOT / "examples" / "django_project"

CONFIGS = {
    "sync-preload": ["-k", "sync", "-w", "3", "--preload"],
    "gthread": ["-k", "gthread", "-w", "2", "--threads", "8"],
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        errors="replace",
        env={**os.environ, **env},
        timeout=60,
    )


def test_system_checks() -> None:
    good = manage("check", "--tag", "liftbridge", LIFTBRIDGE_ADDRESSES="lb:9292")
    assert good.returncode == 0 and "no issues" in good.stdout, good.stderr
    bad = manage("check", LIFTBRIDGE_ADDRESSES="lb-without-port")
    assert bad.returncode != 0
    assert "liftbridge_sync.E001" in bad.stderr and "LIFTBRIDGE['ADDRESSES']" in bad.stderr
    timeout = manage("check", LIFTBRIDGE_ADDRESSES="lb:9292", LIFTBRIDGE_ACK_TIMEOUT="0")
    assert timeout.returncode != 0
    assert "LIFTBRIDGE['ACK_TIMEOUT']" in timeout.stderr


def test_liftbridge_tail(
    liftbridge_address: str, liftbridge_client: Client, web_stream: str
) -> None:
    liftbridge_client.create_stream(web_stream, web_stream, partitions=2)
    for i in range(5):
        liftbridge_client.publish(web_stream, f"m{i}".encode(), partition=i % 2)
    env = {"LIFTBRIDGE_ADDRESSES": liftbridge_address}
    everything = manage("liftbridge_tail", web_stream, "-o", "json", **env)
    assert everything.returncode == 0, everything.stderr
    records = [json.loads(line) for line in everything.stdout.splitlines()]
    assert sorted((r["partition"], r["offset"], r["value"]) for r in records) == [
        (0, 0, "m0"), (0, 1, "m2"), (0, 2, "m4"), (1, 0, "m1"), (1, 1, "m3"),
    ]  # fmt: skip
    window = manage(
        "liftbridge_tail", web_stream, "-P", "0", "--start", "offset:1", "--stop", "offset:1", **env
    )
    assert window.stdout.splitlines() == ["m2"]
    missing = manage("liftbridge_tail", web_stream + "-absent", **env)
    assert missing.returncode == 1 and "CommandError" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = manage("liftbridge_tail", web_stream, "--start", "soon", **env)
    assert bad.returncode == 1 and "unknown start position" in bad.stderr


@pytest.mark.parametrize("count", ["0", "-1"])
def test_liftbridge_tail_refuses_a_count_below_one(count: str) -> None:
    # Refused before any broker is asked (none listens there): it printed one message.
    refused = manage("liftbridge_tail", "s", "-n", count, LIFTBRIDGE_ADDRESSES="127.0.0.1:1")
    assert refused.returncode == 1 and "CommandError" in refused.stderr
    assert "--count must be at least 1" in refused.stderr


def test_liftbridge_tail_offers_only_the_start_positions_it_takes() -> None:
    # last:N is the CLI's (it reads each partition's newest offset first); the command
    # advertised it and then refused it as an unknown start position.
    helped = manage("liftbridge_tail", "--help", LIFTBRIDGE_ADDRESSES="127.0.0.1:1")
    assert helped.returncode == 0 and "offset:N" in helped.stdout, helped.stderr
    assert "last:" not in helped.stdout
    refused = manage(
        "liftbridge_tail", "s", "--start", "last:2", LIFTBRIDGE_ADDRESSES="127.0.0.1:1"
    )
    assert refused.returncode == 1 and "unknown start position 'last:2'" in refused.stderr
    assert "last:N" not in refused.stderr


@pytest.mark.parametrize("config", list(CONFIGS))
def test_django_example_under_gunicorn(
    config: str, web_stream: str, liftbridge_address: str, liftbridge_client: Client
) -> None:
    drive_and_check(
        "liftbridge_demo.wsgi:application",
        CONFIGS[config],
        chdir=PROJECT,
        env={"LIFTBRIDGE_ADDRESSES": liftbridge_address, "EXAMPLE_STREAM": web_stream},
        client=liftbridge_client,
        stream=web_stream,
        requests=1000,
        async_requests=200,
    )


CHECKS_SCRIPT = """
import json
import django
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

settings.configure(INSTALLED_APPS=["liftbridge_sync.django"], LIFTBRIDGE={"ADDRESSES": "a:1"})
django.setup()
cases = {
    "good": {"ADDRESSES": ["a:1", "b:2"], "RETRY": {"max_attempts": 2}},
    "missing": None,
    "not-a-dict": "a:1",
    "no-addresses": {"ACK_TIMEOUT": 1},
    "unknown": {"ADDRESSES": "a:1", "ADRESSES": "b:1"},
    "bad-tls": {"ADDRESSES": "a:1", "TLS": {"client_cert": b"x"}},
    # Right after the same settings with True were checked: 1 == True, and the
    # options built for True were served without a check.
    "telemetry-true": {"ADDRESSES": "a:1", "TELEMETRY": True},
    "telemetry-one": {"ADDRESSES": "a:1", "TELEMETRY": 1},
}
result = {}
for name, value in cases.items():
    with override_settings(LIFTBRIDGE=value):
        if value is None:
            del settings.LIFTBRIDGE
        result[name] = [(m.id, m.msg) for m in run_checks(tags=["liftbridge"])]
print(json.dumps(result))
"""


def test_system_check_messages() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECKS_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found.pop("good") == [] and found.pop("telemetry-true") == []
    expected = {
        "missing": "settings.LIFTBRIDGE is not set",
        "not-a-dict": "must be a dict",
        "no-addresses": "LIFTBRIDGE['ADDRESSES'] is required",
        "unknown": "LIFTBRIDGE['ADRESSES']",
        "bad-tls": "'client_cert' and 'client_key' must be given together",
        "telemetry-one": "LIFTBRIDGE['TELEMETRY'] must be a bool",
    }
    for case, text in expected.items():
        [(check_id, message)] = found[case]
        assert check_id == "liftbridge_sync.E001" and text in message, (case, message)


def test_liftbridge_tail_follow_and_pipes(
    liftbridge_address: str, liftbridge_client: Client, web_stream: str
) -> None:
    liftbridge_client.create_stream(web_stream, web_stream)
    futures = [liftbridge_client.publish_async(web_stream, b"z" * 1024) for _ in range(300)]
    for future in futures:
        future.result()
    env = {**os.environ, "LIFTBRIDGE_ADDRESSES": liftbridge_address, "PYTHONFAULTHANDLER": "1"}
    piped = subprocess.run(
        ["bash", "-c", f"{sys.executable} manage.py liftbridge_tail {web_stream} | head -n 1"],
        cwd=PROJECT, capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert piped.stdout == "z" * 1024 + "\n" and piped.stderr == "", piped.stderr

    process = subprocess.Popen(
        [sys.executable, "manage.py", "liftbridge_tail", web_stream, "-F", "-s", "offset:299"],
        cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"z" * 1024 + b"\n"  # blocks until printed
        liftbridge_client.publish(web_stream, b"after")
        assert process.stdout.readline() == b"after\n"
    finally:
        _, err = interrupt(process)
    assert process.returncode == 130 and b"Traceback" not in err, err


_PROBE = (
    "from django.test import Client; import json; "
    "r = Client().get('/ht/', {'format': 'json'}); "
    "print(json.dumps({'status': r.status_code, 'body': r.json()}))"
)


def test_django_health_check_reports_the_cluster(liftbridge_address: str) -> None:
    up = manage("shell", "-c", _PROBE, LIFTBRIDGE_ADDRESSES=liftbridge_address)
    assert up.returncode == 0, up.stderr
    answer = json.loads(up.stdout.strip().splitlines()[-1])
    assert answer["status"] == 200, answer

    # Nothing listens on port 1: unhealthy, promptly, with the reason.
    down = manage("shell", "-c", _PROBE, LIFTBRIDGE_ADDRESSES="127.0.0.1:1")
    assert down.returncode == 0, down.stderr
    answer = json.loads(down.stdout.strip().splitlines()[-1])
    assert answer["status"] == 500, answer
    assert "Liftbridge unreachable" in json.dumps(answer["body"]), answer


def test_django_health_check_says_what_is_misconfigured() -> None:
    # An address with no port: the client cannot be made. The check names the setting
    # and what is wrong with it, as a configuration problem, not an "unknown error".
    bad = manage("shell", "-c", _PROBE, LIFTBRIDGE_ADDRESSES="lb-without-port")
    assert bad.returncode == 0, bad.stderr
    answer = json.loads(bad.stdout.strip().splitlines()[-1])
    assert answer["status"] == 500, answer
    body = json.dumps(answer["body"])
    assert "unknown error" not in body.lower(), answer
    assert "Liftbridge misconfigured" in body, answer
    assert "LIFTBRIDGE['ADDRESSES']" in body, answer


CLIENT_SCRIPT = """
import gc
import json
import weakref
import django
from django.conf import settings
from django.test import override_settings

settings.configure(INSTALLED_APPS=["liftbridge_sync.django"], LIFTBRIDGE={"ADDRESSES": "a:1"})
django.setup()
from liftbridge_sync.django import client_options, get_client

result = {}
first = get_client()
result["same options"] = client_options() is client_options()
result["same client"] = get_client() is first
with override_settings(LIFTBRIDGE={"ADDRESSES": "b:1"}):
    second = get_client()
    result["new client"] = second is not first and second.options.addresses == ("b:1",)
    result["old closed"] = first.closed
    settings.LIFTBRIDGE["RPC_TIMEOUT"] = 3  # changed in place: seen too
    third = get_client()
    result["changed in place"] = third.options.rpc_timeout == 3 and second.closed
result["back"] = get_client().options.addresses == ("a:1",) and third.closed
# The clients replaced are let go (the per-process registry kept each one, closed).
replaced = [weakref.ref(client) for client in (first, second, third)]
del first, second, third
gc.collect()
result["replaced freed"] = [ref() for ref in replaced] == [None, None, None]
print(json.dumps(result))
"""


def test_a_settings_change_closes_the_client_it_replaces() -> None:
    # No broker: clients are made and closed without a call.
    done = subprocess.run(
        [sys.executable, "-c", CLIENT_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {name: True for name in found} and len(found) == 7, found
