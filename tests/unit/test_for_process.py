"""Client.for_process: one client per process and options; a closed one is let go."""

from __future__ import annotations

import gc
import weakref

import pytest

from liftbridge_sync import Client, ClientOptions
from liftbridge_sync.errors import ConfigurationError

# Nothing listens there: clients are made and closed without a call.
A = ClientOptions(addresses=("127.0.0.1:1",))
B = ClientOptions(addresses=("127.0.0.1:1",), rpc_timeout=3)


def _freed(ref: weakref.ref[Client]) -> bool:
    gc.collect()
    return ref() is None


def test_a_closed_shared_client_is_let_go() -> None:
    shared = Client.for_process(A)
    assert Client.for_process(A) is shared
    ref = weakref.ref(shared)
    shared.close()
    del shared
    assert _freed(ref)  # the registry held it, closed, for as long as the process lived
    fresh = Client.for_process(A)
    try:
        assert not fresh.closed and Client.for_process(A) is fresh
    finally:
        fresh.close()


def test_a_client_replaced_after_a_settings_change_is_let_go() -> None:
    # As liftbridge_sync.django.get_client does: the new options' client, then the
    # old one closed. Each change left a closed client behind for good.
    old = Client.for_process(A)
    new = Client.for_process(B)
    try:
        refs = [weakref.ref(old)]
        old.close()
        del old
        assert _freed(refs[0])
        assert Client.for_process(B) is new and not new.closed
    finally:
        new.close()


def test_closing_an_old_client_leaves_the_new_one_of_its_options() -> None:
    old = Client.for_process(A)
    old.close()
    new = Client.for_process(A)  # replaces it
    try:
        old.close()  # again: idempotent, and not the registry's entry any more
        assert Client.for_process(A) is new and not new.closed
    finally:
        new.close()


@pytest.mark.parametrize("timeout", [-1, float("nan"), "1"], ids=["negative", "nan", "str"])
def test_a_close_refusing_its_timeout_leaves_the_shared_client_usable_and_shared(
    timeout: object,
) -> None:
    # The refused close() closed nothing, but let the registry forget the client: the
    # next for_process() made another, and the first stayed open, unowned.
    shared = Client.for_process(A)
    try:
        with pytest.raises(ConfigurationError):
            shared.close(timeout)  # type: ignore[arg-type]
        assert not shared.closed
        assert Client.for_process(A) is shared
    finally:
        shared.close()
    assert shared.closed
