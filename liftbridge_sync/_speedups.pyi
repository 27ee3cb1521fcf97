"""Stub of the optional C extension (liftbridge_sync/_speedups.c)."""

from typing import Any

from liftbridge_sync.models import Ack, AckPolicy

def setup(ack_type: type[Ack], policies: tuple[AckPolicy, AckPolicy, AckPolicy], /) -> None: ...
def frame_value(head: bytes, value: bytes, correlation_id: bytes, /) -> bytes: ...
def decode_ack(message: bytes | bytearray | memoryview, /) -> Ack | None: ...
def frame_id(head: bytes, value: bytes, prefix: str, n: int, /) -> tuple[bytes, str]: ...
def frame_values(
    head: bytes, values: list[object], base: str, /
) -> tuple[list[bytes], list[str]]: ...
def scan_acks(
    buf: bytearray, pos: int, stream_id: int, max_frame: int, /
) -> tuple[int, list[Ack], int, bytes, bytes, tuple[int, int, bytes] | None]: ...
def settle_acks(
    acks: list[Any], pending: dict[str, Any], lock: Any, owner: bool, /
) -> tuple[int, list[Any]]: ...
def send_held(fd: int, data: bytes | bytearray | memoryview, /) -> int: ...
def recv_held(fd: int, size: int, /) -> bytes | None: ...
def setup_entries(entry_type: type, future_type: type, /) -> None: ...
def make_entries(
    framed: list[bytes],
    ids: list[str],
    partition: int,
    wants_ack: bool,
    timeout: float,
    deadline: float,
    /,
) -> tuple[list[Any], list[Any]]: ...
def make_entry(
    framed: bytes,
    correlation_id: str,
    partition: int,
    wants_ack: bool,
    timeout: float,
    deadline: float,
    /,
) -> Any: ...
def frame_entry(
    head: bytes,
    value: bytes,
    prefix: str,
    n: int,
    max_size: int,
    partition: int,
    wants_ack: bool,
    timeout: float,
    deadline: float,
    /,
) -> Any: ...
def pop_answered(queue: Any, pending: dict[str, Any], /) -> bool: ...
def run_callbacks(
    futures: list[Any], start: int, /
) -> tuple[int, list[tuple[Any, BaseException]]]: ...
def setup_submit(
    publisher_type: type, lock_type: type, deque_type: type, heads: dict[Any, bytes], no_ack: Any, /
) -> None: ...
def setup_submit_stream(stream_type: type, gathering_type: type, write_here_at: int, /) -> None: ...
def submit_plain(
    publisher: Any, stream: str, value: bytes, partition: int, ack_policy: Any, timeout: float, /
) -> Any: ...
