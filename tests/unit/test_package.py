"""The package surface: exports, typing marker, generated code, import side effects."""

from __future__ import annotations

import filecmp
import importlib.metadata
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import liftbridge_sync

ROOT = Path(__file__).resolve().parents[2]


def test_all_is_sorted_and_importable() -> None:
    assert liftbridge_sync.__all__ == sorted(liftbridge_sync.__all__)
    for name in liftbridge_sync.__all__:
        assert hasattr(liftbridge_sync, name), name


def test_py_typed_is_shipped() -> None:
    assert (ROOT / "liftbridge_sync" / "py.typed").exists()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]["liftbridge_sync"]
    assert {"py.typed", "_proto/*.pyi", "_speedups.pyi"} <= set(package_data)
    # Wheels carry the compiled extension, not its sources (the sdist has those).
    excluded = config["tool"]["setuptools"]["exclude-package-data"]["liftbridge_sync"]
    assert {"*.c", "*.h"} <= set(excluded)


def test_metadata_has_one_version_source_and_the_license() -> None:
    """pyproject.toml reads the version from ``__version__``; the license is Apache-2.0."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dynamic"] == ["version"] and "version" not in project
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    versions = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if "Python :: 3." in c}
    assert versions == {"3.11", "3.12", "3.13"}
    assert "[metadata]" not in (ROOT / "setup.cfg").read_text()
    installed = importlib.metadata.version("liftbridge-sync")
    assert installed == liftbridge_sync.__version__


def test_import_has_no_side_effects() -> None:
    """Importing and constructing a client starts no thread and opens no connection."""
    script = textwrap.dedent(
        """
        import threading, sys
        before = threading.active_count()
        import liftbridge_sync
        client = liftbridge_sync.Client("127.0.0.1:1")
        assert threading.active_count() == before, threading.enumerate()
        assert not client._core.pool.connected
        assert "nats" not in sys.modules
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    """Regenerating liftbridge_sync/_proto from protos/ gives byte-identical files."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={ROOT / 'protos'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            str(ROOT / "protos" / "liftbridge_sync" / "_proto" / "api.proto"),
        ],
        check=True,
    )
    generated = tmp_path / "liftbridge_sync" / "_proto"
    committed = ROOT / "liftbridge_sync" / "_proto"
    names = ["api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"]
    match, mismatch, errors = filecmp.cmpfiles(generated, committed, names, shallow=False)
    assert not mismatch and not errors, (
        f"stale generated code: {mismatch + errors}; run make codegen"
    )
    assert sorted(match) == names


def test_generated_code_imports_from_inside_the_package() -> None:
    from liftbridge_sync._proto import api_pb2, api_pb2_grpc

    assert api_pb2.DESCRIPTOR.package == "proto"
    assert "/proto.API/PublishAsync" in Path(api_pb2_grpc.__file__).read_text()
    # The v2 reverse flag is field 12, as the server's liftbridge-api v2 module says.
    assert api_pb2.SubscribeRequest.DESCRIPTOR.fields_by_name["reverse"].number == 12


def test_import_does_not_load_the_extras() -> None:
    """The core stays light: web frameworks and CLI libraries load only when asked for."""
    script = textwrap.dedent(
        """
        import sys
        import liftbridge_sync
        heavy = ("click", "rich", "flask", "django", "gunicorn", "werkzeug", "typer")
        heavy += ("opentelemetry", "pyspark", "nats", "health_check")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
        assert not loaded, loaded
        assert "liftbridge_sync.cli" not in sys.modules
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


def _run_fresh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True
    )


def test_every_public_name_resolves_and_is_listed_before_use() -> None:
    """In a fresh process the lazily loaded names are in ``dir()`` and ``import *``."""
    result = _run_fresh(
        """
        import liftbridge_sync
        listed = set(dir(liftbridge_sync))
        missing = set(liftbridge_sync.__all__) - listed
        assert not missing, missing
        namespace = {}
        exec("from liftbridge_sync import *", namespace)
        missing = set(liftbridge_sync.__all__) - set(namespace)
        assert not missing, missing
        for name in liftbridge_sync.__all__:
            assert namespace[name] is getattr(liftbridge_sync, name), name
        try:
            liftbridge_sync.NoSuchName
        except AttributeError as exc:
            assert "NoSuchName" in str(exc), exc
        else:
            raise AssertionError("an unknown name resolved")
        print("ok")
        """
    )
    assert result.stdout.strip() == "ok", result.stderr


#: What a client's first RPC needs, and ``import liftbridge_sync`` does not.
TRANSPORT = ("grpc", "h2", "hpack", "tenacity", "google.protobuf")


def test_import_does_not_load_the_transport() -> None:
    """``import liftbridge_sync`` and its errors, options and values load no grpc,
    protobuf or HTTP/2; a ``Client`` loads them and makes its RPCs as before."""
    result = _run_fresh(
        f"""
        import sys
        transport = {TRANSPORT!r}

        def loaded():
            return sorted(
                m for m in sys.modules if any(m == t or m.startswith(t + ".") for t in transport)
            )

        import liftbridge_sync
        from liftbridge_sync import AckPolicy, ByKey, ClientOptions, LiftbridgeError, Metadata
        from liftbridge_sync import RetryPolicy, StartAt, StopAt, TLSOptions
        assert not loaded(), loaded()
        assert isinstance(liftbridge_sync.speedups_active(), bool)
        assert AckPolicy.ALL and ClientOptions(addresses=("h:1",)) and StartAt.earliest()
        assert StopAt.latest() and ByKey() and RetryPolicy() and TLSOptions() and Metadata
        assert not loaded(), loaded()
        assert issubclass(liftbridge_sync.NoSuchStreamError, LiftbridgeError)

        Client = liftbridge_sync.Client
        assert Client.__module__ == "liftbridge_sync", Client.__module__
        retry = liftbridge_sync.RetryPolicy(max_attempts=1)
        with Client("127.0.0.1:1", rpc_timeout=1.0, retry=retry) as client:
            assert not client._core.pool.connected
            try:
                client.fetch_metadata()
            except LiftbridgeError:
                pass  # nothing listens on port 1: the RPC ran and failed as it must
            else:
                raise AssertionError("fetch_metadata answered from port 1")
        assert "grpc" in sys.modules  # loaded for the client, once
        print("ok")
        """
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_an_exit_hook_registered_after_the_import_finds_its_client_open() -> None:
    """The client's exit hook is registered at ``import liftbridge_sync``, as before the
    names loaded lazily: atexit runs the application's later hook first, with its
    client still open (registered when Client was first named, it ran first and closed
    the client under the application's hook)."""
    result = _run_fresh(
        """
        import atexit
        import liftbridge_sync

        def app_exit_hook():
            print("open" if not client.closed else "closed")

        atexit.register(app_exit_hook)
        client = liftbridge_sync.Client("127.0.0.1:1")
        """
    )
    assert result.stdout.strip() == "open", result.stderr
