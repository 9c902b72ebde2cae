"""Serialisation of an intent's payload to the JSON text drainer.enqueue stores."""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Set

from ._errors import PayloadError, PayloadTooLarge

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "MAX_PAYLOAD_DEPTH", "serialize_payload"]

#: The default payload limit: the default of the database setting
#: drainer.max_payload_bytes that drainer.enqueue enforces.
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20

#: Deepest nesting of arrays and objects accepted in a payload.
MAX_PAYLOAD_DEPTH = 256


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
    most :data:`MAX_PAYLOAD_DEPTH` deep. Object keys are sorted, so equal
    payloads always give the same text. Anything else (a ``set``, a
    ``datetime``, a ``Decimal``, ``bytes``, NaN, a string with a NUL
    character or a lone surrogate, a cycle) raises :class:`PayloadError`
    naming where it is, e.g. ``payload['items'][2]``.

    With ``max_bytes`` (default 1 MiB) a text longer than that many bytes of
    UTF-8 raises :class:`PayloadTooLarge`, before the database is touched.
    The database measures the text form of the jsonb value, which has a
    space after every ``:`` and ``,`` and so is almost always longer than
    this compact text: a payload refused here would be refused there at the
    same limit. Pass ``None`` to leave the check to the database alone.
    """
    _check(payload, "payload", 0, set())
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"))
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

