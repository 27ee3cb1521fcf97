"""Every mapping the library hands out behaves as a read-only ``dict``: property tests.

A received message's headers are a view of a protobuf map, whose ``[]`` inserts a
missing key and whose lookups take ``bytes`` for ``str``: the view must answer exactly
as a plain ``dict`` of the same items, and no lookup may change the message.
"""

from __future__ import annotations

import dataclasses
import operator
import pickle
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_sync import Message, Metadata
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.activity import decode_event
from liftbridge_sync.models import Ack, FrozenMap, PartitionMetadata
from tests.messages import make_message

_HEADERS = st.dictionaries(st.text(max_size=8), st.binary(max_size=8), max_size=6)
#: Keys a caller might try: hashable values of every kind, a lone surrogate (no protobuf
#: string can hold it) and NaN (never equal to itself).
_OTHER_KEYS: st.SearchStrategy[Hashable] = st.one_of(
    st.text(max_size=8),
    st.binary(max_size=8),
    st.integers(),
    st.floats(),
    st.none(),
    st.just("\ud800"),
    st.tuples(st.integers()),
)


def _probes(keys: list[Any]) -> st.SearchStrategy[list[Hashable]]:
    """Present keys, their ``bytes`` spellings, and any other keys."""
    present = [st.sampled_from(keys), st.sampled_from([k.encode() for k in keys])] if keys else []
    return st.lists(st.one_of(*present, _OTHER_KEYS), max_size=10)


_SENTINEL = object()

#: Single-key lookups of the ``Mapping`` interface, each called on the view and the dict.
_LOOKUPS: list[Callable[[Any, Any], object]] = [
    operator.getitem,
    operator.contains,
    lambda m, k: m.get(k),
    lambda m, k: m.get(k, _SENTINEL),
    lambda m, k: k in m.keys(),
]


def _outcome(lookup: Callable[[Any, Any], object], mapping: object, key: object) -> object:
    try:
        return ("ok", lookup(mapping, key))
    except Exception as exc:  # compared by type: a dict's error must be the view's
        return ("raised", type(exc))


def _assert_like_dict(view: Mapping[Any, Any], expected: dict[Any, Any], probes: list[Any]) -> None:
    """Every ``Mapping`` operation of ``view`` answers as ``expected`` does."""
    for key in [*probes, [], {}]:  # unhashable keys raise TypeError, as with a dict
        for lookup in _LOOKUPS:
            assert _outcome(lookup, view, key) == _outcome(lookup, expected, key), key
        if isinstance(key, Hashable) and key in expected:
            assert (key, expected[key]) in view.items()
    assert len(view) == len(expected)
    assert bool(view) is bool(expected)
    assert sorted(map(repr, view)) == sorted(map(repr, expected))
    assert view.keys() == expected.keys()
    assert view.items() == expected.items()
    assert sorted(map(repr, view.values())) == sorted(map(repr, expected.values()))
    assert view == expected and expected == view and not (view != expected)
    assert view != {**expected, object(): 1}
    assert dict(view) == expected
    assert repr(view) == f"FrozenMap({dict(view)!r})"
    assert hash(view) == hash(FrozenMap(expected))
    assert pickle.loads(pickle.dumps(view)) == expected
    with pytest.raises(TypeError):
        view["x"] = 1  # type: ignore[index]


@given(data=st.data(), headers=_HEADERS)
def test_received_message_headers_are_a_read_only_dict(
    data: st.DataObject, headers: dict[str, bytes]
) -> None:
    # Both transports decode a message the same way: api_pb2.Message.FromString on the
    # gRPC frame's body (upb's C decoder in the h2 receiver and in grpcio's deserializer).
    wire = api_pb2.Message(offset=3, value=b"v", headers=headers).SerializeToString()
    msg = Message.from_proto(api_pb2.Message.FromString(wire))
    probes = data.draw(_probes(list(headers)))
    _assert_like_dict(msg.headers, headers, probes)
    # No lookup changed the message: same headers, same wire bytes.
    assert dict(msg.headers) == headers
    assert Message.from_proto(api_pb2.Message.FromString(wire)) == msg
    assert msg._pb.SerializeToString(deterministic=True) == api_pb2.Message.FromString(
        wire
    ).SerializeToString(deterministic=True)


@given(data=st.data(), headers=_HEADERS)
def test_constructed_message_headers_are_a_read_only_dict(
    data: st.DataObject, headers: dict[str, bytes]
) -> None:
    msg = make_message(0, headers=headers)
    _assert_like_dict(msg.headers, headers, data.draw(_probes(list(headers))))
    assert dict(msg.headers) == headers


@given(
    data=st.data(),
    streams=st.dictionaries(
        st.text(min_size=1, max_size=6),
        st.lists(st.integers(0, 50), unique=True, max_size=5),
        max_size=4,
    ),
)
def test_metadata_mappings_are_read_only_dicts(
    data: st.DataObject, streams: dict[str, list[int]]
) -> None:
    response = api_pb2.FetchMetadataResponse(
        streamMetadata=[
            api_pb2.StreamMetadata(
                name=name,
                subject=name,
                partitions={p: api_pb2.PartitionMetadata(id=p, leader="b") for p in ids},
            )
            for name, ids in streams.items()
        ]
    )
    meta = Metadata.from_proto(
        api_pb2.FetchMetadataResponse.FromString(response.SerializeToString()), fetched_at=0.0
    )
    expected_streams = dict(meta.streams)
    assert set(expected_streams) == set(streams)
    _assert_like_dict(meta.streams, expected_streams, data.draw(_probes(list(streams))))
    for name, ids in streams.items():
        info = meta.streams[name]
        expected = {p: info.partitions[p] for p in ids}
        assert sorted(expected) == sorted(ids)
        probes = data.draw(st.lists(st.one_of(st.sampled_from([*ids, -1]), _OTHER_KEYS)))
        _assert_like_dict(info.partitions, expected, probes)
        assert meta.partition(name, 10**6) is None


def _protobuf_values(obj: object) -> list[str]:
    """Fields of a model object that hold a protobuf value (a container or message)."""
    names = (
        [f.name for f in dataclasses.fields(obj)]  # type: ignore[arg-type]
        if dataclasses.is_dataclass(obj)
        else [n for n in dir(obj) if not n.startswith("_")]
    )
    found = []
    for name in names:
        value = getattr(obj, name)
        if type(value).__module__.startswith("google."):
            found.append(name)
    return found


def test_no_model_hands_out_a_protobuf_container() -> None:
    """Activity events, metadata and acks copy repeated fields to tuples: no live view."""
    events = [
        api_pb2.ActivityStreamEvent(
            id=1,
            op=api_pb2.CREATE_STREAM,
            createStreamOp=api_pb2.CreateStreamOp(stream="s", partitions=[0, 1]),
        ),
        api_pb2.ActivityStreamEvent(
            id=2,
            op=api_pb2.PAUSE_STREAM,
            pauseStreamOp=api_pb2.PauseStreamOp(stream="s", partitions=[1]),
        ),
        api_pb2.ActivityStreamEvent(
            id=3,
            op=api_pb2.RESUME_STREAM,
            resumeStreamOp=api_pb2.ResumeStreamOp(stream="s", partitions=[1]),
        ),
        api_pb2.ActivityStreamEvent(
            id=4,
            op=api_pb2.SET_STREAM_READONLY,
            setStreamReadonlyOp=api_pb2.SetStreamReadonlyOp(stream="s", partitions=[1]),
        ),
        api_pb2.ActivityStreamEvent(
            id=5,
            op=api_pb2.JOIN_CONSUMER_GROUP,
            joinConsumerGroupOp=api_pb2.JoinConsumerGroupOp(groupId="g", streams=["s"]),
        ),
    ]
    objects: list[object] = [
        decode_event(e.SerializeToString(), offset=0, timestamp_ns=0) for e in events
    ]
    part = api_pb2.PartitionMetadata(id=1, leader="b", replicas=["b"], isr=["b"])
    meta = Metadata.from_proto(
        api_pb2.FetchMetadataResponse(
            brokers=[api_pb2.Broker(id="b", host="h", port=1)],
            streamMetadata=[api_pb2.StreamMetadata(name="s", subject="s", partitions={1: part})],
        ),
        fetched_at=0.0,
    )
    info = meta.streams["s"]
    objects += [
        meta,
        *meta.brokers,
        info,
        info.partitions[1],
        PartitionMetadata.from_proto("s", part),
    ]
    objects.append(Ack.from_proto(api_pb2.Ack(stream="s", offset=1)))
    for obj in objects:
        assert _protobuf_values(obj) == [], obj
