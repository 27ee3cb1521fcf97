"""An ack's fields, ``AckCore``: the C type and its pure-Python twin keep the same fields
(one suite, run over both), and the public ``Ack`` built on the active one behaves as
the frozen dataclass it is documented to be."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
import weakref
from typing import Any

import pytest

from liftbridge_sync import _extension
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.models._ack import ACK_FIELD_NAMES, PyAckCore
from tests.twins import twins

C_CORE: Any = None if _extension.MODULE is None else _extension.MODULE.AckCore

IMPLEMENTATIONS = twins(PyAckCore, C_CORE)


@pytest.fixture(params=IMPLEMENTATIONS)
def core(request: pytest.FixtureRequest) -> type[PyAckCore]:
    kind: type[PyAckCore] = request.param
    return kind


def test_fields_are_unset_until_written_then_kept(core: type[PyAckCore]) -> None:
    fields = core()
    for name in ACK_FIELD_NAMES:
        with pytest.raises(AttributeError):
            getattr(fields, name)
    for i, name in enumerate(ACK_FIELD_NAMES):
        object.__setattr__(fields, name, f"value-{i}")
    assert [getattr(fields, name) for name in ACK_FIELD_NAMES] == [
        f"value-{i}" for i in range(len(ACK_FIELD_NAMES))
    ]
    object.__delattr__(fields, "stream")
    with pytest.raises(AttributeError):
        fields.stream  # noqa: B018 - the read is the test


def test_it_has_no_other_attributes(core: type[PyAckCore]) -> None:
    fields = core()
    with pytest.raises(AttributeError):
        fields.colour = "red"  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        core("positional")  # type: ignore[call-arg]


def test_fields_in_a_reference_cycle_are_collected(core: type[PyAckCore]) -> None:
    class Holder:
        fields: object = None

    holder = Holder()
    fields = core()
    object.__setattr__(fields, "ack_error", holder)
    holder.fields = fields
    ref = weakref.ref(holder)
    del fields, holder
    gc.collect()
    assert ref() is None


def _ack(**changes: Any) -> Ack:
    values: dict[str, Any] = {
        "stream": "orders",
        "partition": 2,
        "partition_subject": "orders",
        "message_subject": "orders.2",
        "offset": 41,
        "ack_inbox": "inbox",
        "correlation_id": "id-1",
        "ack_policy": AckPolicy.ALL,
    }
    return Ack(**{**values, **changes})


def test_the_public_ack_is_a_frozen_dataclass_on_the_active_core() -> None:
    ack = _ack()
    assert isinstance(ack, C_CORE or PyAckCore)
    assert dataclasses.is_dataclass(ack) and not hasattr(ack, "__dict__")
    assert [f.name for f in dataclasses.fields(ack)] == list(ACK_FIELD_NAMES)
    # The defaults, from the constructor (no class attribute hides a field).
    assert (ack.reception_timestamp_ns, ack.commit_timestamp_ns, ack.ack_error) == (0, 0, None)
    assert _ack(ack_error="TOO_LARGE").ack_error == "TOO_LARGE"
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack.offset = 42  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del ack.offset  # type: ignore[misc]
    with pytest.raises(TypeError):
        Ack("orders")  # type: ignore[misc, call-arg] # keyword-only
    with pytest.raises(TypeError):
        Ack(stream="orders")  # type: ignore[call-arg] # the others are required


def test_equality_hash_repr_replace_pickle_and_copy() -> None:
    ack = _ack(reception_timestamp_ns=5, commit_timestamp_ns=7)
    same = _ack(reception_timestamp_ns=5, commit_timestamp_ns=7)
    assert ack == same and hash(ack) == hash(same) and ack is not same
    assert ack != _ack(offset=42) and len({ack, same, _ack(offset=42)}) == 2
    assert repr(ack).startswith("Ack(stream='orders', partition=2, ")
    assert "ack_error=None" in repr(ack)
    moved = dataclasses.replace(ack, offset=42)
    assert (moved.offset, moved.stream, ack.offset) == (42, "orders", 41)
    for twin in (pickle.loads(pickle.dumps(ack)), copy.copy(ack), copy.deepcopy(ack)):
        assert type(twin) is Ack and twin == ack
    assert dataclasses.asdict(ack)["commit_timestamp_ns"] == 7
