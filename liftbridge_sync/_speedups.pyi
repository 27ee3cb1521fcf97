"""Stub of the optional C extension (liftbridge_sync/_speedups.c)."""

from collections.abc import Callable
from typing import Any

from liftbridge_sync.models import Ack, AckPolicy

def setup(ack_type: type[Ack], policies: tuple[AckPolicy, AckPolicy, AckPolicy], /) -> None: ...
def frame_value(head: bytes, value: bytes, correlation_id: bytes, /) -> bytes: ...
def decode_ack(message: bytes | bytearray | memoryview, /) -> Ack | None: ...
def frame_id(head: bytes, value: bytes, prefix: str, n: int, /) -> tuple[bytes, str]: ...
def frame_values(
    head: bytes, values: list[object], base: str, /
) -> tuple[list[bytes], list[str]]: ...
def frame_pairs(
    heads: list[bytes], items: list[Any], base: str, /
) -> tuple[list[bytes], list[str], list[int]]: ...
def scan_acks(
    buf: bytearray, pos: int, stream_id: int, max_frame: int, /
) -> tuple[int, list[Ack], int, bytes, bytes, tuple[int, int, bytes] | None]: ...
def settle_acks(
    acks: list[Any], pending: dict[str, Any], lock: Any, owner: bool, /
) -> tuple[int, list[Any]]: ...
def answers_another_stream(stream: str, framed: bytes, /) -> bool: ...
def send_held(fd: int, data: bytes | bytearray | memoryview, /) -> int: ...
def recv_held(fd: int, size: int, /) -> bytes | None: ...
def setup_entries(entry_type: type, future_type: type, /) -> None: ...
def make_entries(
    framed: list[bytes],
    ids: list[str],
    partition: int | list[int],
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
def setup_submit(deque_type: type, heads: dict[Any, bytes], no_ack: Any, /) -> None: ...
def submit_plain(
    core: PendingCore,
    stream: str,
    value: bytes,
    partition: int,
    ack_policy: Any,
    timeout: float,
    direct: bool = False,
    /,
) -> Any: ...

class FutureCore:
    """A publish future's state (``_speedups_future.c``); the base of ``PublishFuture``."""

    _state: str
    _result: Any
    _exception: BaseException | None
    _done_callbacks: Any
    _gate: Any
    ledger: Any
    _waited: bool
    _conditioned: bool

class AckCore:
    """The fields of an ack (``_speedups_ack.c``); the base of ``models.Ack``."""

    stream: str
    partition: int
    partition_subject: str
    message_subject: str
    offset: int
    ack_inbox: str
    correlation_id: str
    ack_policy: Any
    reception_timestamp_ns: int
    commit_timestamp_ns: int
    ack_error: str | None

class EntryCore:
    """One pending publish (``_speedups_entry.c``); the base of the publisher's Entry."""

    framed: bytes
    correlation_id: str
    partition: int
    wants_ack: bool
    future: Any
    timeout: float
    deadline: float
    seq: int
    resent_at: float
    key: Any
    def __init__(
        self,
        framed: bytes,
        correlation_id: str,
        partition: int,
        wants_ack: bool,
        future: Any,
        timeout: float,
        deadline: float,
        seq: int = 0,
        resent_at: float = 0.0,
        key: Any = None,
    ) -> None: ...

class PendingCore:
    def __init__(
        self, max_in_flight: int, max_message: int, id_prefix: str, clock: Callable[[], float]
    ) -> None: ...
    @property
    def pending(self) -> dict[str, Any]: ...
    @property
    def expiry(self) -> dict[float, Any]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def id_prefix(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def max_message(self) -> int: ...
    live: Any
    outbound: Any
    sleep_until: float
    in_line: int
    closing: bool
    finished: bool
    def acquire(self, blocking: bool = True, /) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...
    def next_seq(self) -> int: ...
    def next_id(self) -> int: ...

class OutboundQueue:
    def __init__(self, write_here_at: int) -> None: ...
    @property
    def frames(self) -> list[bytes]: ...
    @property
    def write_here_at(self) -> int: ...
    queued_bytes: int
    taken_bytes: int
    asked: int
    signalled: bool
    done: bool
    close_requested: bool
    direct_mark: int
    combining: int
    deferred: bool
    def acquire(self, blocking: bool = True, /) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...
    def take(self) -> list[bytes]: ...

class Gate:
    def __init__(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def open(self) -> None: ...
