"""Serialisation of an intent's payload to the JSON text drainer.enqueue stores."""

from __future__ import annotations

import datetime
import json
import math
from typing import Any, Optional, Set

from ._errors import PayloadError, PayloadTooLarge

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "MAX_PAYLOAD_DEPTH", "JSONString", "js_date_string", "serialize_payload"]

#: The default payload limit: the default of the database setting
#: drainer.max_payload_bytes that drainer.enqueue enforces.
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20

#: Deepest nesting of arrays and objects accepted in a payload.
MAX_PAYLOAD_DEPTH = 256


class JSONString:
    """A payload that is deliberately a JSON string value.

    ``enqueue`` refuses a ``str`` payload, because a ``str`` there is almost
    always an object serialised by mistake (``json.dumps(obj)``), which would
    be stored as one JSON string instead of the object. When the provider
    really expects a JSON string as the whole body, say so::

        dc.enqueue(conn, run, step, "echo", "", dc.JSONString("hello"))   # body: "hello"

    ``value`` is the string itself (not JSON text: ``JSONString('{"a":1}')``
    is the string ``{"a":1}``, stored as ``"{\\"a\\":1}"``). It is also
    accepted inside a payload, where it is the same as the plain ``str``.
    """

    __slots__ = ("value",)

    value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"JSONString holds a str, not {type(value).__name__}")
        object.__setattr__(self, "value", value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("JSONString is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSONString) and other.value == self.value

    def __hash__(self) -> int:
        return hash((JSONString, self.value))

    def __repr__(self) -> str:
        return f"JSONString({self.value!r})"


_STR_PAYLOAD = (
    "is a str: pass the object itself (a dict, a list, ...), not json.dumps(obj), which would be stored "
    "as one JSON string instead of the object (JSON text you received: json.loads(text)); to send a JSON "
    "string on purpose, wrap it: JSONString(value)"
)

_UTC = datetime.timezone.utc


def js_date_string(value: "datetime.date") -> str:
    """The JSON string of a ``datetime`` or ``date`` in a payload.

    An aware ``datetime`` is written as JavaScript's ``Date.prototype.toISOString``
    (what ``JSON.stringify`` writes for a ``Date``, so the TypeScript library
    stores the same text for the same instant): converted to UTC,
    ``YYYY-MM-DDTHH:MM:SS.sssZ``, milliseconds always three digits; the
    microseconds below the millisecond are dropped (truncated toward the
    earlier time, as ``Date.UTC`` does with a fractional millisecond). A
    ``date`` is ``YYYY-MM-DD``. A naive ``datetime`` raises ``ValueError``:
    which instant it means depends on a time zone it does not have.
    """
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("naive datetime")
        u = value.astimezone(_UTC)
        return (
            f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
            f".{u.microsecond // 1000:03d}Z"
        )
    if isinstance(value, datetime.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    raise TypeError(f"not a date: {type(value).__name__}")


def _default(value: Any) -> Any:
    """json.dumps's hook for the types _check accepted beyond JSON's own."""
    if isinstance(value, JSONString):
        return value.value
    if isinstance(value, datetime.date):
        return js_date_string(value)
    raise TypeError(type(value).__name__)


def _child(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def _check(value: Any, path: str, depth: int, stack: Set[int]) -> None:
    """Raise PayloadError for the first value json.dumps or jsonb would refuse."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise PayloadError(path, f"is a str that is not valid UTF-8 (lone surrogate at index {e.start})") from None
        if "\x00" in value:
            raise PayloadError(path, "is a str containing a NUL character, which Postgres jsonb cannot store") from None
        return
    if isinstance(value, int):
        return
    if isinstance(value, JSONString):
        _check(value.value, path, depth, stack)
        return
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise PayloadError(
                path,
                "is a naive datetime.datetime (no tzinfo), which is ambiguous: give it a time zone "
                "(datetime.now(timezone.utc), dt.replace(tzinfo=...) or dt.astimezone()); "
                "it is sent in UTC as YYYY-MM-DDTHH:MM:SS.sssZ",
            )
        try:
            value.astimezone(_UTC)
        except (OverflowError, ValueError):
            raise PayloadError(path, "is a datetime.datetime whose UTC time is outside the years 1 to 9999") from None
        return
    if isinstance(value, datetime.date):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(path, f"is the float {value!r}, which JSON cannot represent")
        return
    if isinstance(value, (dict, list, tuple)):
        if depth >= MAX_PAYLOAD_DEPTH:
            raise PayloadError(path, f"is nested more than {MAX_PAYLOAD_DEPTH} levels deep")
        if id(value) in stack:
            raise PayloadError(path, "is a circular reference")
        stack.add(id(value))
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    if not isinstance(k, str):
                        raise PayloadError(path, f"has a key of type {type(k).__name__}; JSON object keys must be str")
                    _check(k, f"{path} key {k!r}" if "\x00" not in k else f"{path} key", depth + 1, stack)
                    _check(v, _child(path, k), depth + 1, stack)
            else:
                for i, v in enumerate(value):
                    _check(v, _child(path, i), depth + 1, stack)
        finally:
            stack.discard(id(value))
        return
    raise PayloadError(path, f"is of type {type(value).__module__}.{type(value).__qualname__}, which is not JSON-serialisable")


def serialize_payload(payload: Any, max_bytes: Optional[int] = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Return the compact JSON text of payload, checked for drainer.enqueue.

    Accepted: ``None``, ``bool``, ``int``, finite ``float``, ``str``, and
    ``dict`` (with ``str`` keys), ``list`` and ``tuple`` of those, nested at
    most :data:`MAX_PAYLOAD_DEPTH` deep; an aware ``datetime`` becomes the
    string JavaScript's ``toISOString`` writes (UTC, milliseconds, ``Z``;
    sub-millisecond digits dropped) and a ``date`` ``YYYY-MM-DD``
    (:func:`js_date_string`). Object keys are sorted, so equal payloads
    always give the same text. Anything else (a ``set``, a naive
    ``datetime``, a ``time``, a ``Decimal``, ``bytes``, NaN, a string with a
    NUL character or a lone surrogate, a cycle) raises :class:`PayloadError`
    naming where it is, e.g. ``payload['items'][2]``.

    The payload itself may not be a ``str``: that is nearly always
    ``json.dumps(obj)`` passed by mistake, which would store one JSON string
    instead of the object. :class:`PayloadError` says so; a deliberate JSON
    string payload is :class:`JSONString`.

    With ``max_bytes`` (default 1 MiB) a text longer than that many bytes of
    UTF-8 raises :class:`PayloadTooLarge`, before the database is touched.
    The database measures the text form of the jsonb value, which has a
    space after every ``:`` and ``,`` and so is almost always longer than
    this compact text: a payload refused here would be refused there at the
    same limit. Pass ``None`` to leave the check to the database alone.
    """
    if isinstance(payload, str):
        raise PayloadError("payload", _STR_PAYLOAD)
    _check(payload, "payload", 0, set())
    try:
        text = json.dumps(
            payload, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), default=_default
        )
    except (ValueError, TypeError, RecursionError) as e:
        # _check let it through, json refused it anyway (e.g. an int longer
        # than sys.get_int_max_str_digits()). Only the exception's type is
        # named: its text could quote a value.
        raise PayloadError("payload", f"is not JSON-serialisable ({type(e).__name__})") from None
    if max_bytes is not None:
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise PayloadTooLarge(size, max_bytes)
    return text

