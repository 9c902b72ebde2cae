"""What the sync and async clients share: names, SQL text, argument checks and answer parsing.

Nothing here runs a statement. :mod:`drainer_client._client` (psycopg
``Connection``), :mod:`drainer_client.aio` (psycopg ``AsyncConnection``) and
:mod:`drainer_client._sqla` (SQLAlchemy sessions and connections, sync and
async) each run the statements built here and hand the rows back here, so
the three give the same answers and raise the same exceptions.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, Iterator, NamedTuple, Optional, Sequence

from psycopg import pq

from ._errors import ConnectionClosed, DrainerError, UsageError
from ._key import idempotency_key, validate_tuple
from ._payload import serialize_payload

#: The schema `drainer migrate` creates when not given --schema.
DEFAULT_SCHEMA = "drainer"

#: Statuses an intent never leaves (docs/reference.md §2).
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "compensated", "cancelled"})

#: Statuses that wait for a human (`drainer resolve`): the row will not move
#: by itself, so ``wait`` returns them too.
PARKED_STATUSES = frozenset({"outcome_unknown", "compensation_failed"})

#: Default delays of ``wait``: the first read at once, then after
#: ``min_poll`` seconds, the delay doubling up to ``max_poll``.
DEFAULT_MIN_POLL = 0.05
DEFAULT_MAX_POLL = 1.0

# The names `drainer migrate --schema` accepts.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# The traceparent the library passes on: printable ASCII, bounded.
_TRACEPARENT = re.compile(r"[\x20-\x7e]{1,512}")


class Enqueued(NamedTuple):
    """What ``enqueue`` returns: the intent's key, and whether this call created the row."""

    key: str
    created: bool


class Outcome(NamedTuple):
    """The outcome of an intent, as ``result`` and ``wait`` return it.

    ``status`` is one of the statuses of docs/reference.md §2; ``response`` the
    provider's answer decoded from JSON (``None`` before success, and for a
    pruned row); ``last_error`` the last error recorded, or ``None``.
    """

    status: str
    response: Any
    last_error: Optional[str]


def check_open(conn: Any, op: str, expected: type, accepts: str, other: type, hint: str) -> None:
    """Refuse conn unless it is an open ``expected`` connection.

    UsageError names what op accepts and, when conn is an ``other`` (the
    client of the other flavour), the hint; ConnectionClosed says conn is
    closed or broken.
    """
    if not isinstance(conn, expected):
        tail = ": " + hint if isinstance(conn, other) else ""
        raise UsageError(f"{op}: conn must be {accepts}, not {type(conn).__name__}{tail}")
    if conn.closed or conn.broken or conn.info.transaction_status == pq.TransactionStatus.UNKNOWN:
        raise ConnectionClosed(f"{op}: the connection is closed")


def is_settled(status: str) -> bool:
    """Whether ``wait`` stops at this status: terminal or parked."""
    return status in TERMINAL_STATUSES or status in PARKED_STATUSES


def schema_ident(schema: object) -> str:
    """The schema as a quoted SQL identifier, after checking it is a name `drainer migrate` accepts.

    The accepted names hold no quote, so quoting is plain concatenation and
    the same text works for every driver.
    """
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(
            f"invalid schema name {schema!r}: use the schema given to `drainer migrate --schema` "
            "(lower-case letters, digits and _, at most 63, not starting with a digit)"
        )
    return '"' + schema + '"'


# The statements, with {schema} and named parameters {name}. Casts are
# written CAST(x AS t), never x::t, so that SQLAlchemy's text() does not
# read a parameter out of a cast; there is no '%' in them, for the drivers
# that format parameters with it.
_ENQUEUE_SQL = (
    "SELECT e.key, e.created FROM {schema}.enqueue("
    "CAST({agent_run_id} AS text), CAST({step_id} AS text), CAST({tool_name} AS text), "
    "CAST({business_scope} AS text), CAST({payload} AS jsonb)) AS e"
)
_ENQUEUE_TRACED_SQL = (
    "SELECT e.key, e.created FROM {schema}.enqueue("
    "CAST({agent_run_id} AS text), CAST({step_id} AS text), CAST({tool_name} AS text), "
    "CAST({business_scope} AS text), CAST({payload} AS jsonb), CAST({traceparent} AS text)) AS e"
)
# response is read as text and decoded here, whatever jsonb loader the
# connection has.
_RESULT_SQL = "SELECT r.status, CAST(r.response AS text), r.last_error FROM {schema}.result(CAST({key} AS text)) AS r"

#: Parameter styles: psycopg's ``%(name)s`` and SQLAlchemy text()'s ``:name``.
PSYCOPG = "psycopg"
SQLALCHEMY = "sqlalchemy"


def _render(template: str, schema: str, names: Sequence[str], style: str) -> str:
    marks = {n: (f"%({n})s" if style == PSYCOPG else f":{n}") for n in names}
    return template.format(schema=schema, **marks)


class Statement(NamedTuple):
    """A statement ready for a driver: its text and its named parameters."""

    text: str
    params: Dict[str, Any]


class EnqueueCall(NamedTuple):
    """A checked enqueue: the statement, and the key the database must answer."""

    statement: Statement
    key: str
    schema: str


def check_max_payload_bytes(max_payload_bytes: object) -> None:
    if max_payload_bytes is not None and (
        not isinstance(max_payload_bytes, int) or isinstance(max_payload_bytes, bool) or max_payload_bytes <= 0
    ):
        raise UsageError("enqueue: max_payload_bytes must be a positive int or None")


def prepare_enqueue(
    agent_run_id: str,
    step_id: str,
    tool_name: str,
    business_scope: str,
    payload: Any,
    schema: str,
    max_payload_bytes: Optional[int],
    traceparent: Optional[str],
    style: str,
) -> EnqueueCall:
    """Check every argument of an enqueue (before any connection is used) and build its statement."""
    validate_tuple(agent_run_id, step_id, tool_name, business_scope)
    check_max_payload_bytes(max_payload_bytes)
    text = serialize_payload(payload, max_payload_bytes)
    ident = schema_ident(schema)
    if traceparent is not None and (not isinstance(traceparent, str) or not _TRACEPARENT.fullmatch(traceparent)):
        raise UsageError("enqueue: traceparent must be a non-empty str of printable ASCII (a W3C traceparent)")
    params: Dict[str, Any] = {
        "agent_run_id": agent_run_id,
        "step_id": step_id,
        "tool_name": tool_name,
        "business_scope": business_scope,
        "payload": text,
    }
    template = _ENQUEUE_SQL
    if traceparent is not None:
        params["traceparent"] = traceparent
        template = _ENQUEUE_TRACED_SQL
    stmt = Statement(_render(template, ident, list(params), style), params)
    return EnqueueCall(stmt, idempotency_key(agent_run_id, step_id, tool_name, business_scope), schema)


def enqueue_answer(call: EnqueueCall, row: Optional[Sequence[Any]]) -> Enqueued:
    """The row the enqueue statement returned, as an :class:`Enqueued`."""
    if row is None:
        raise DrainerError(f"enqueue: {call.schema}.enqueue returned no row: is the schema migrated by `drainer migrate`?")
    key, created = row[0], row[1]
    if key != call.key:
        # Never expected: the SQL function and this library compute the same
        # key (both are checked against the shared vectors).
        raise DrainerError(
            f"enqueue: {call.schema}.enqueue answered key {key}, this library computes {call.key}: "
            "roll the transaction back and report this"
        )
    return Enqueued(key, bool(created))


def require_key(op: str, key: object) -> str:
    if not isinstance(key, str) or key == "":
        raise UsageError(f"{op}: key must be a non-empty str (a key returned by enqueue)")
    return key


def prepare_result(key: str, schema: str, style: str, op: str = "result") -> Statement:
    """Check the arguments of a result read and build its statement."""
    require_key(op, key)
    ident = schema_ident(schema)
    return Statement(_render(_RESULT_SQL, ident, ["key"], style), {"key": key})


def result_answer(row: Optional[Sequence[Any]]) -> Optional[Outcome]:
    """The row of ``<schema>.result`` as an :class:`Outcome` (``None``: no row)."""
    if row is None:
        return None
    status, response, last_error = row[0], row[1], row[2]
    return Outcome(status, None if response is None else json.loads(response), last_error)


def check_wait_args(key: object, timeout: object, min_poll: object, max_poll: object, schema: object) -> None:
    """Check the arguments of ``wait`` (before any connection is used)."""
    require_key("wait", key)
    for name, v in (("timeout", timeout), ("min_poll", min_poll), ("max_poll", max_poll)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0) or math.isinf(v):
            raise UsageError(f"wait: {name} must be a finite number of seconds, at least 0")
    if min_poll <= 0 or max_poll < min_poll:  # type: ignore[operator]
        raise UsageError("wait: need 0 < min_poll <= max_poll")
    schema_ident(schema)


def wait_inside_transaction(key: str) -> UsageError:
    return UsageError(
        f"wait {key}: the connection is inside a transaction; commit the transaction that enqueued first "
        "(the daemon cannot see an uncommitted intent), then wait outside any transaction"
    )


def enqueue_would_autocommit(what: str) -> UsageError:
    return UsageError(
        f"enqueue: {what}, so the intent would commit on its own, apart from your writes; "
        "call enqueue inside a transaction together with your own writes "
        "(psycopg: `with conn.transaction():`; SQLAlchemy: `with session.begin():` or `with conn.begin():`)"
    )


def delays(min_poll: float, max_poll: float) -> Iterator[float]:
    """The sleeps of ``wait`` between reads: min_poll, doubling up to max_poll."""
    delay = float(min_poll)
    while True:
        yield delay
        delay = min(delay * 2, float(max_poll))
