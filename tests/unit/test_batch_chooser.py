"""BatchChooser's inlined ByKey choice is ByKey's own, on every partition count."""

from __future__ import annotations

from typing import cast

import pytest

from liftbridge_sync import ByKey, ConfigurationError
from liftbridge_sync._publishing.routing import BatchChooser
from liftbridge_sync._transport.core import ClientCore


class _Counts:
    """A core that answers one partition count (all BatchChooser asks of it)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def partition_count(self, stream: str) -> int:
        return self.count


def _chooser(count: int) -> BatchChooser:
    return BatchChooser(cast(ClientCore, _Counts(count)), "orders", None, ByKey())


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16])
def test_by_key_choice_matches_by_key(count: int) -> None:
    chooser = _chooser(count)
    keys: list[bytes | None] = [None, b"", *(b"%d" % i for i in range(200))]
    for key in keys:
        assert chooser(key, b"v") == ByKey().partition("orders", key, b"v", count)


def test_by_key_zero_partitions_still_raises() -> None:
    with pytest.raises(ConfigurationError, match="partition_count"):
        _chooser(0)(b"k", b"v")
