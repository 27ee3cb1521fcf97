"""The parameters of a suite run over a pure-Python implementation and its C twin."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["twins"]


def twins(python: object, c: object | None) -> list[Any]:
    """``pytest.param``s for ``python`` (id ``python``) and ``c`` (id ``c``, skipped
    when the C speedups are not built or are disabled: then ``c`` is ``None``)."""
    return [
        pytest.param(python, id="python"),
        pytest.param(
            c,
            id="c",
            marks=pytest.mark.skipif(c is None, reason="C speedups not built or disabled"),
        ),
    ]
