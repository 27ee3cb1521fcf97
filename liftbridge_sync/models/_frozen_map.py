"""A read-only, picklable mapping for the models' mapping fields and message headers.

Immutable values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, overload

__all__ = ["FrozenMap"]

_K = TypeVar("_K")
_V = TypeVar("_V")
_D = TypeVar("_D")

#: Stands for "no such key" in lookups where ``None`` may be a stored value.
_ABSENT: Any = object()


class FrozenMap(Mapping[_K, _V]):
    """A read-only, picklable mapping.

    Behaves like a ``dict`` that cannot be changed: a missing key is absent (``[]``
    raises ``KeyError``, ``get`` returns the default, ``in`` is ``False``), and no
    lookup ever changes the mapping.

    Immutable; safe to share between threads.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[_K, _V] | None = None) -> None:
        self._data: Mapping[_K, _V] = dict(data) if data else {}

    @classmethod
    def wrap(cls, data: Mapping[_K, _V]) -> FrozenMap[_K, _V]:
        """A view of a protobuf ``map<string, ...>`` field without copying it.

        The caller must never change ``data``. Used for the headers of received
        messages: copying the protobuf map for every message would cost about a
        microsecond each. The view only looks keys up through the map's ``get``:
        the protobuf map's ``[]`` *inserts* a missing key, and its lookups take
        ``bytes`` for ``str`` and raise on a string UTF-8 cannot encode; the view
        answers such keys as a ``dict`` would (absent).
        """
        view: FrozenMap[_K, _V] = _ProtoMapView.__new__(_ProtoMapView)
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


class _ProtoMapView(FrozenMap[_K, _V]):
    """:meth:`FrozenMap.wrap`'s view: key lookups that never insert into the protobuf map.

    Immutable; safe to share between threads.
    """

    __slots__ = ()

    def _lookup(self, key: object) -> Any:
        if isinstance(key, str):
            try:
                return self._data.get(key, _ABSENT)  # type: ignore[arg-type]
            except UnicodeError:  # a lone surrogate: no such key can be stored
                return _ABSENT
        hash(key)  # an unhashable key raises TypeError, as with a dict
        return _ABSENT  # the map holds only str keys (it would match bytes as str)

    def __getitem__(self, key: _K) -> _V:
        value = self._lookup(key)
        if value is _ABSENT:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return self._lookup(key) is not _ABSENT

    @overload
    def get(self, key: _K, /) -> _V | None: ...
    @overload
    def get(self, key: _K, default: _V | _D, /) -> _V | _D: ...
    def get(self, key: _K, default: object = None, /) -> object:
        value = self._lookup(key)
        return default if value is _ABSENT else value
