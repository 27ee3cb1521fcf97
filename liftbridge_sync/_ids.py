"""The checks of ids and optional text arguments: cursor, group and consumer ids,
correlation ids and inboxes.

Low in the package (no import but the errors) so that the models (``StartAt``) check a
cursor id as the wire layer does. Thread-safe: pure functions.
"""

from __future__ import annotations

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError

__all__ = ["ID_MAX_BYTES", "check_id", "check_label", "check_optional_text"]

#: The longest cursor, group or consumer id, in bytes of UTF-8 (as long as a subject).
ID_MAX_BYTES = 1024


def check_optional_text(name: str, value: object) -> str | None:
    """``None`` or a non-empty ``str`` (ids, inboxes)."""
    if value is not None and not isinstance(value, str):
        raise ArgumentTypeError(f"{name!r} must be a str or None, got {type(value).__name__}")
    if value == "":
        raise ConfigurationError(f"{name!r} must be a non-empty str or None")
    try:
        value is None or value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(f"{name!r} is not valid UTF-8") from exc
    return value


def check_label(name: str, value: object, *, optional: bool = False) -> str | None:
    """A non-empty ``str`` of valid UTF-8, not blank, without control characters, at
    most ``ID_MAX_BYTES`` long (or ``None`` when ``optional``): a consumer id, and
    what :func:`check_id` checks further.

    Raises:
        ArgumentTypeError: not a ``str`` (nor ``None`` when ``optional``).
        ConfigurationError: empty, blank, too long, not valid UTF-8, or with a control
            character.
    """
    if not optional and not isinstance(value, str):
        raise ArgumentTypeError(f"{name!r} must be a str, got {type(value).__name__}")
    if not optional and not value:
        # Not check_optional_text's words: they offer None, which is refused here.
        raise ConfigurationError(f"{name!r} must be a non-empty str")
    text = check_optional_text(name, value)
    if text is None:
        return None
    if not text.strip() or not all(ch == " " or ch.isprintable() for ch in text):
        raise ConfigurationError(
            f"{name!r} must not be blank or contain control characters, got {text[:40]!r}"
        )
    size = len(text.encode("utf-8"))
    if size > ID_MAX_BYTES:
        raise ConfigurationError(
            f"{name!r} must be at most {ID_MAX_BYTES} bytes of UTF-8, got {size:,}"
        )
    return text


def check_id(name: str, value: object, *, optional: bool = False) -> str | None:
    """:func:`check_label`, and no comma: cursor and group ids.

    The server keys a cursor by ``"<cursor id>,<stream>,<partition>"``: a comma in the
    id would let two different cursors share one key and overwrite each other.

    Raises:
        ArgumentTypeError: not a ``str``.
        ConfigurationError: as :func:`check_label`, or with a comma.
    """
    text = check_label(name, value, optional=optional)
    if text is not None and "," in text:
        raise ConfigurationError(
            f"{name!r} must not contain ',': the server keys cursors by "
            "'<cursor id>,<stream>,<partition>', so two ids could share one key"
        )
    return text
