"""Stub of the optional C extension (liftbridge_sync/_speedups.c)."""

from typing import Any

from liftbridge_sync.models import Ack, AckPolicy

def setup(ack_type: type[Ack], policies: tuple[AckPolicy, AckPolicy, AckPolicy], /) -> None: ...
def frame_id(head: bytes, value: bytes, prefix: str, n: int, /) -> tuple[bytes, str]: ...
def frame_values(
    head: bytes, values: list[object], base: str, /
) -> tuple[list[bytes], list[str]]: ...
def scan_acks(
    buf: bytearray, pos: int, stream_id: int, max_frame: int, /
) -> tuple[int, list[Ack], int, bytes, bytes]: ...
def settle_acks(
    acks: list[Any], pending: dict[str, Any], lock: Any, owner: bool, /
) -> tuple[int, list[Any]]: ...
