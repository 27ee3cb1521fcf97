"""One pending publish, ``EntryCore``: the C type and its pure-Python twin take the same
arguments and keep the same fields (one suite, run over both)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from liftbridge_sync._publishing.futures import PublishFuture
from liftbridge_sync._publishing.pending import Entry, PyEntryCore
from liftbridge_sync._wire import speedups
from tests.twins import twins

IMPLEMENTATIONS = twins(PyEntryCore, speedups.EntryCore)

FIELDS: tuple[str, ...] = PyEntryCore.__slots__  # every field, in order


@pytest.fixture(params=IMPLEMENTATIONS)
def core(request: pytest.FixtureRequest) -> type[PyEntryCore]:
    kind: type[PyEntryCore] = request.param
    return kind


def test_it_keeps_what_it_was_built_with_and_defaults_the_rest(core: type[PyEntryCore]) -> None:
    future: PublishFuture[Any] = PublishFuture()
    entry = core(b"req", "id.1", 3, True, future, 2.5, 102.5)
    assert tuple(getattr(entry, name) for name in FIELDS) == (
        b"req",
        "id.1",
        3,
        True,
        future,
        2.5,
        102.5,
        0,
        0.0,
        None,
    )


def test_keywords_and_writes(core: type[PyEntryCore]) -> None:
    future: PublishFuture[Any] = PublishFuture()
    entry = core(
        framed=b"r",
        correlation_id="c",
        partition=0,
        wants_ack=False,
        future=future,
        timeout=1.0,
        deadline=2.0,
        seq=9,
        resent_at=1.5,
        key=("s", 0),
    )
    assert (entry.seq, entry.resent_at, entry.key, entry.wants_ack) == (9, 1.5, ("s", 0), False)
    entry.seq, entry.resent_at, entry.key = 10, 3.0, None
    assert (entry.seq, entry.resent_at, entry.key) == (10, 3.0, None)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((b"r", "c", 0, True, None, 1.0), {}),  # no deadline
        ((b"r", "c", 0, True, None, 1.0, 2.0, 0, 0.0, None, "extra"), {}),
        ((b"r", "c", 0, True, None, 1.0, 2.0), {"colour": "red"}),
    ],
)
def test_wrong_arguments_raise_type_error(
    core: type[PyEntryCore], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):
        core(*args, **kwargs)


def test_it_has_no_other_attributes(core: type[PyEntryCore]) -> None:
    entry = core(b"r", "c", 0, True, None, 1.0, 2.0)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        entry.colour = "red"  # type: ignore[attr-defined]


def test_an_entry_in_a_reference_cycle_is_collected(core: type[PyEntryCore]) -> None:
    class Holder:
        entry: object = None

    holder = Holder()
    entry = core(b"r", "c", 0, True, None, 1.0, 2.0, key=holder)  # type: ignore[arg-type]
    holder.entry = entry
    ref = weakref.ref(holder)
    del entry, holder
    gc.collect()
    assert ref() is None


def test_the_publishers_entry_adds_its_methods_to_the_active_core() -> None:
    entry = Entry(b"\0\0\0\0\1a", "c", 0, True, PublishFuture(), 2.0, 10.0)
    assert isinstance(entry, speedups.EntryCore or PyEntryCore)
    assert entry.sent_at() == 8.0
    entry.resent_at = 9.0
    assert entry.sent_at() == 9.0
    assert "correlation_id='c'" in repr(entry)
