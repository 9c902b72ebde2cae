"""enqueue, result and wait: the producer side of drainer on a psycopg 3 connection."""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Iterator, NamedTuple, Optional, TypeVar

import psycopg
from psycopg import pq, sql
from psycopg.rows import tuple_row

from ._errors import ConnectionClosed, DrainerError, UsageError, WaitTimeout
from ._key import idempotency_key, validate_tuple
from ._payload import DEFAULT_MAX_PAYLOAD_BYTES, serialize_payload

__all__ = [
    "DEFAULT_SCHEMA",
    "TERMINAL_STATUSES",
    "PARKED_STATUSES",
    "Enqueued",
    "Outcome",
    "enqueue",
    "result",
    "wait",
    "is_settled",
]

#: The schema `drainer migrate` creates when not given --schema.
DEFAULT_SCHEMA = "drainer"

#: Statuses an intent never leaves (docs/reference.md §2).
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "compensated", "cancelled"})

#: Statuses that wait for a human (`drainer resolve`): the row will not move
#: by itself, so :func:`wait` returns them too.
PARKED_STATUSES = frozenset({"outcome_unknown", "compensation_failed"})

# The names `drainer migrate --schema` accepts.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_T = TypeVar("_T")


class Enqueued(NamedTuple):
    """What :func:`enqueue` returns: the intent's key, and whether this call created the row."""

    key: str
    created: bool


class Outcome(NamedTuple):
    """The outcome of an intent, as :func:`result` and :func:`wait` return it.

    ``status`` is one of the statuses of docs/reference.md §2; ``response`` the
    provider's answer decoded from JSON (``None`` before success, and for a
    pruned row); ``last_error`` the last error recorded, or ``None``.
    """

    status: str
    response: Any
    last_error: Optional[str]


def is_settled(status: str) -> bool:
    """Whether :func:`wait` stops at this status: terminal or parked."""
    return status in TERMINAL_STATUSES or status in PARKED_STATUSES


def _schema(schema: str) -> sql.Identifier:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(
            f"invalid schema name {schema!r}: use the schema given to `drainer migrate --schema` "
            "(lower-case letters, digits and _, at most 63, not starting with a digit)"
        )
    return sql.Identifier(schema)


def _check_open(conn: psycopg.Connection[Any], op: str) -> None:
    if not isinstance(conn, psycopg.Connection):
        raise UsageError(f"{op}: conn must be a psycopg.Connection, not {type(conn).__name__}")
    if conn.closed or conn.broken or conn.info.transaction_status == pq.TransactionStatus.UNKNOWN:
        raise ConnectionClosed(f"{op}: the connection is closed")


def _run(conn: psycopg.Connection[Any], op: str, fn: Callable[[], _T]) -> _T:
    """Run fn, turning psycopg's errors about a closed or broken connection into ConnectionClosed."""
    try:
        return fn()
    except ConnectionClosed:
        raise
    except (psycopg.OperationalError, psycopg.InterfaceError) as e:
        if conn.closed or conn.broken:
            raise ConnectionClosed(f"{op}: the connection was closed or broke: {type(e).__name__}") from e
        raise


def enqueue(
    conn: psycopg.Connection[Any],
    agent_run_id: str,
    step_id: str,
    tool_name: str,
    business_scope: str,
    payload: Any,
    *,
    schema: str = DEFAULT_SCHEMA,
    max_payload_bytes: Optional[int] = DEFAULT_MAX_PAYLOAD_BYTES,
    traceparent: Optional[str] = None,
) -> Enqueued:
    """Record a "call this tool" intent in the connection's current transaction.

    Calls ``<schema>.enqueue`` on ``conn``; the row commits or rolls back
    with the caller's transaction, together with the caller's own writes.
    The library never commits: on a connection that is not in autocommit
    mode psycopg has opened a transaction (commit it with ``conn.commit()``
    or use ``with conn.transaction():``); on an autocommit connection call it
    inside ``with conn.transaction():`` -- outside one it raises
    :class:`UsageError`, since the intent would commit on its own.

    Returns ``(key, created)``: same tuple and same payload as an existing
    intent (a retried step) gives the same key with ``created = False``,
    also after the row was pruned.

    Checked before the database is touched, so that a refusal leaves the
    caller's transaction usable and nothing written: the tuple
    (:class:`InvalidTuple`), the payload (:class:`PayloadError`,
    :class:`PayloadTooLarge` above ``max_payload_bytes``, default 1 MiB; pass
    ``None`` to leave the limit to the database's setting
    drainer.max_payload_bytes), the schema name and the connection
    (:class:`ConnectionClosed`, :class:`UsageError`).

    Errors of the database propagate as psycopg raises them, and abort the
    caller's transaction (roll it back): same tuple with a different payload
    is ``psycopg.errors.UniqueViolation`` (SQLSTATE 23505, the message names
    the key); under REPEATABLE READ or SERIALIZABLE a concurrent enqueue of
    the same tuple can raise ``psycopg.errors.SerializationFailure`` (40001),
    retried like any serialization failure.

    ``payload`` is any JSON value built of dict, list, tuple, str, int,
    float, bool and None (see :func:`serialize_payload`); it becomes the
    body sent to the provider. ``traceparent`` optionally continues the
    agent's W3C trace at dispatch.
    """
    validate_tuple(agent_run_id, step_id, tool_name, business_scope)
    if max_payload_bytes is not None and (
        not isinstance(max_payload_bytes, int) or isinstance(max_payload_bytes, bool) or max_payload_bytes <= 0
    ):
        raise UsageError("enqueue: max_payload_bytes must be a positive int or None")
    text = serialize_payload(payload, max_payload_bytes)
    ident = _schema(schema)
    if traceparent is not None and (not isinstance(traceparent, str) or not re.fullmatch(r"[\x20-\x7e]{1,512}", traceparent)):
        raise UsageError("enqueue: traceparent must be a non-empty str of printable ASCII (a W3C traceparent)")
    _check_open(conn, "enqueue")
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise UsageError(
            "enqueue: the connection is in autocommit mode outside any transaction, so the intent would "
            "commit on its own; call enqueue inside `with conn.transaction():` together with your own writes"
        )
    want = idempotency_key(agent_run_id, step_id, tool_name, business_scope)
    params = [agent_run_id, step_id, tool_name, business_scope, text]
    if traceparent is None:
        query = sql.SQL("SELECT e.key, e.created FROM {}.enqueue(%s::text, %s::text, %s::text, %s::text, %s::jsonb) AS e")
    else:
        query = sql.SQL(
            "SELECT e.key, e.created FROM {}.enqueue(%s::text, %s::text, %s::text, %s::text, %s::jsonb, %s::text) AS e"
        )
        params.append(traceparent)
    stmt = query.format(ident)

    def run() -> Any:
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(stmt, params)
            return cur.fetchone()

    row = _run(conn, "enqueue", run)
    if row is None:
        raise DrainerError(f"enqueue: {schema}.enqueue returned no row: is the schema migrated by `drainer migrate`?")
    key, created = row
    if key != want:
        # Never expected: the SQL function and this library compute the same
        # key (both are checked against the shared vectors).
        raise DrainerError(
            f"enqueue: {schema}.enqueue answered key {key}, this library computes {want}: "
            "roll the transaction back and report this"
        )
    return Enqueued(key, bool(created))


def _require_key(op: str, key: object) -> str:
    if not isinstance(key, str) or key == "":
        raise UsageError(f"{op}: key must be a non-empty str (a key returned by enqueue)")
    return key


def result(conn: psycopg.Connection[Any], key: str, *, schema: str = DEFAULT_SCHEMA) -> Optional[Outcome]:
    """Read the outcome of an intent through ``<schema>.result``.

    Returns ``(status, response, last_error)`` as an :class:`Outcome`, or
    ``None`` when no row with this key is visible to ``conn`` (not committed
    yet, rolled back, or unknown). A pruned row answers its final status with
    a ``None`` response. It runs in whatever transaction state ``conn`` is
    in, like any query; to wait for an outcome use :func:`wait`.
    """
    _require_key("result", key)
    ident = _schema(schema)
    _check_open(conn, "result")
    # response is read as text and decoded here, whatever jsonb loader the
    # connection has.
    stmt = sql.SQL("SELECT r.status, r.response::text, r.last_error FROM {}.result(%s::text) AS r").format(ident)

    def run() -> Any:
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(stmt, [key])
            return cur.fetchone()

    row = _run(conn, "result", run)
    if row is None:
        return None
    status, response, last_error = row
    return Outcome(status, None if response is None else json.loads(response), last_error)


def _delays(min_poll: float, max_poll: float) -> Iterator[float]:
    delay = min_poll
    while True:
        yield delay
        delay = min(delay * 2, max_poll)


def wait(
    conn: psycopg.Connection[Any],
    key: str,
    timeout: float,
    *,
    schema: str = DEFAULT_SCHEMA,
    min_poll: float = 0.05,
    max_poll: float = 1.0,
) -> Outcome:
    """Wait until an intent is terminal or parked, and return its outcome.

    Returns the :class:`Outcome` once the status is terminal (``succeeded``,
    ``failed``, ``compensated``, ``cancelled``) or parked for a human
    (``outcome_unknown``, ``compensation_failed``); raises
    :class:`WaitTimeout` once ``timeout`` seconds have passed without that.

    drainer sends no notification when an outcome changes (its NOTIFY
    channel, ``<schema>.outbox``, only tells the daemon that rows were
    enqueued), so ``wait`` polls ``<schema>.result``: at once, then after
    ``min_poll`` seconds (0.05), the delay doubling up to ``max_poll`` (1.0),
    never sleeping past the deadline, with a last read at the deadline. Each
    read is one lookup by the unique key, in its own short transaction, so
    no snapshot is held open while waiting.

    Call it outside any transaction, after committing the one that
    enqueued: the daemon cannot see an uncommitted intent, and a transaction
    would hold one snapshot that never sees the outcome change. A connection
    inside a transaction raises :class:`UsageError`. It works on autocommit
    connections and on ones that are not (each read is then committed: it
    writes nothing); the connection is left idle.
    """
    _require_key("wait", key)
    for name, v in (("timeout", timeout), ("min_poll", min_poll), ("max_poll", max_poll)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0) or v == float("inf"):
            raise UsageError(f"wait: {name} must be a finite number of seconds, at least 0")
    if min_poll <= 0 or max_poll < min_poll:
        raise UsageError("wait: need 0 < min_poll <= max_poll")
    _schema(schema)
    _check_open(conn, "wait")
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise UsageError(
            f"wait {key}: the connection is inside a transaction; commit the transaction that enqueued first "
            "(the daemon cannot see an uncommitted intent), then wait outside any transaction"
        )

    def read() -> Optional[Outcome]:
        def txn() -> Optional[Outcome]:
            with conn.transaction():
                return result(conn, key, schema=schema)

        return _run(conn, "wait", txn)

    deadline = time.monotonic() + timeout
    delays = _delays(float(min_poll), float(max_poll))
    while True:
        out = read()
        if out is not None and is_settled(out.status):
            return out
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(key, float(timeout), None if out is None else out.status)
        time.sleep(min(next(delays), left))
