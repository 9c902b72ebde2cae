"""The idempotency key of docs/reference.md §1 and the tuple rules of enqueue."""

from __future__ import annotations

import hashlib
from typing import Dict, List, Optional, Tuple

from ._errors import InvalidTuple

__all__ = [
    "KEY_PREFIX",
    "MAX_FIELD_BYTES",
    "TUPLE_FIELDS",
    "canonical_tuple",
    "idempotency_key",
    "validate_tuple",
]

#: Prefix of keys of the first (and current) key scheme. A future scheme
#: gets a new prefix; old rows keep their key.
KEY_PREFIX = "idem_v1_"

#: Largest accepted size of one tuple field, in bytes of UTF-8.
MAX_FIELD_BYTES = 1024

#: The four fields, in the order of the function arguments.
TUPLE_FIELDS = ("agent_run_id", "step_id", "tool_name", "business_scope")

# JCS (RFC 8785) string escaping: '"', '\\' and the code points below U+0020
# are escaped (the short forms where JSON has them, else \u00xx in lower-case
# hex); everything else, including U+007F, '/', U+2028, U+2029 and all of
# non-ASCII, stays as it is. json.dumps escapes every non-ASCII character
# unless ensure_ascii=False, and its escaping is not specified as JCS's, so
# the rule is spelled out here as a translation table.
_JCS_ESCAPES: Dict[int, str] = {c: "\\u%04x" % c for c in range(0x20)}
_JCS_ESCAPES.update(
    {
        ord('"'): '\\"',
        ord("\\"): "\\\\",
        ord("\b"): "\\b",
        ord("\f"): "\\f",
        ord("\n"): "\\n",
        ord("\r"): "\\r",
        ord("\t"): "\\t",
    }
)


def _jcs_string(s: str) -> str:
    return '"' + s.translate(_JCS_ESCAPES) + '"'


def _lone_surrogate(s: str) -> Optional[int]:
    """Index of the first lone surrogate of s (not encodable as UTF-8), or None."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def _encodable(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidTuple([(field, f"must be a str, not {type(value).__name__}")])
    i = _lone_surrogate(value)
    if i is not None:
        raise InvalidTuple([(field, f"is not valid UTF-8 (lone surrogate at index {i})")])
    return value


def canonical_tuple(agent_run_id: str, step_id: str, tool_name: str, business_scope: str) -> str:
    """Return the canonical JSON text of a tuple, the text the key hashes.

    A JSON object with the four fields in sorted key order, no whitespace,
    strings escaped as JCS (RFC 8785) does. Any strings are accepted (the
    enqueue rules are :func:`validate_tuple`'s business); a value that is not
    a ``str`` or holds a lone surrogate, which has no UTF-8 form, raises
    :class:`InvalidTuple`.
    """
    values = dict(zip(TUPLE_FIELDS, (agent_run_id, step_id, tool_name, business_scope)))
    for field, value in values.items():
        _encodable(field, value)
    return (
        '{"agent_run_id":' + _jcs_string(agent_run_id)
        + ',"business_scope":' + _jcs_string(business_scope)
        + ',"step_id":' + _jcs_string(step_id)
        + ',"tool_name":' + _jcs_string(tool_name)
        + "}"
    )


def idempotency_key(agent_run_id: str, step_id: str, tool_name: str, business_scope: str) -> str:
    """Return the idempotency key of a four-tuple (docs/reference.md §1).

    ``"idem_v1_"`` followed by the first 32 lower-case hex digits of the
    SHA-256 of :func:`canonical_tuple`'s UTF-8 bytes: the same key as the Go
    function ``idemkey.Tuple.Key`` and the SQL function
    ``drainer.idempotency_key``, byte for byte. The key depends on nothing
    else (no time, no randomness), so a retried step gets the same key.

    It accepts any strings, including ones :func:`enqueue` would refuse;
    ``InvalidTuple`` only for a non-``str`` or a lone surrogate.
    """
    canonical = canonical_tuple(agent_run_id, step_id, tool_name, business_scope)
    return KEY_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def tuple_problems(agent_run_id: object, step_id: object, tool_name: object, business_scope: object) -> List[Tuple[str, str]]:
    """Every ``(field, reason)`` that breaks the enqueue rules, in tuple order."""
    problems: List[Tuple[str, str]] = []
    for field, value in zip(TUPLE_FIELDS, (agent_run_id, step_id, tool_name, business_scope)):
        if not isinstance(value, str):
            problems.append((field, f"must be a str, not {type(value).__name__}"))
            continue
        if value == "" and field != "business_scope":
            problems.append((field, "must not be empty"))
            continue
        i = _lone_surrogate(value)
        if i is not None:
            problems.append((field, f"is not valid UTF-8 (lone surrogate at index {i})"))
            continue
        if "\x00" in value:
            problems.append((field, f"contains a NUL character at index {value.index(chr(0))}"))
            continue
        size = len(value.encode("utf-8"))
        if size > MAX_FIELD_BYTES:
            problems.append((field, f"is {size} bytes of UTF-8, more than the limit of {MAX_FIELD_BYTES}"))
    return problems


def validate_tuple(agent_run_id: object, step_id: object, tool_name: object, business_scope: object) -> None:
    """Apply the enqueue rules of docs/reference.md §1, without touching any database.

    ``agent_run_id``, ``step_id`` and ``tool_name`` must be non-empty;
    every field must be a ``str`` with a UTF-8 form (no lone surrogate), no
    NUL character and at most 1024 bytes of UTF-8; ``business_scope`` may be
    empty. Raises :class:`InvalidTuple` naming the first invalid field and
    listing every problem found.
    """
    problems = tuple_problems(agent_run_id, step_id, tool_name, business_scope)
    if problems:
        raise InvalidTuple(problems)
