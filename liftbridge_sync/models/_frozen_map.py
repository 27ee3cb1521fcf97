"""A read-only, picklable mapping for the models' mapping fields and message headers.

Immutable values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["FrozenMap"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenMap(Mapping[_K, _V]):
    """A read-only, picklable mapping.

    Immutable; safe to share between threads.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[_K, _V] | None = None) -> None:
        self._data: Mapping[_K, _V] = dict(data) if data else {}

    @classmethod
    def wrap(cls, data: Mapping[_K, _V]) -> FrozenMap[_K, _V]:
        """A view of ``data`` without copying it; the caller must never change ``data``.

        Used for the headers of received messages: copying the protobuf map for every
        message would cost about a microsecond each.
        """
        view: FrozenMap[_K, _V] = cls.__new__(cls)
        view._data = data
        return view

    def __getitem__(self, key: _K) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({dict(self._data)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self._data),))
