"""enqueue, result and wait: the producer side of drainer on a psycopg 3 connection
(or a SQLAlchemy session or connection).

The statements, the checks of the arguments and the reading of the answers
are :mod:`drainer_client._core`'s, shared with :mod:`drainer_client.aio`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from . import _sqla
from ._core import (
    DEFAULT_MAX_POLL,
    DEFAULT_MIN_POLL,
    DEFAULT_SCHEMA,
    PARKED_STATUSES,
    PSYCOPG,
    TERMINAL_STATUSES,
    Enqueued,
    Outcome,
    Statement,
    check_open,
    check_wait_args,
    delays,
    enqueue_answer,
    enqueue_would_autocommit,
    is_settled,
    prepare_enqueue,
    prepare_result,
    result_answer,
    wait_inside_transaction,
)
from ._errors import ConnectionClosed, UsageError, WaitTimeout
from ._payload import DEFAULT_MAX_PAYLOAD_BYTES

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

_T = TypeVar("_T")


def _check_open(conn: Any, op: str) -> None:
    check_open(
        conn, op, psycopg.Connection,
        "a psycopg.Connection or a SQLAlchemy Session or Connection",
        psycopg.AsyncConnection, "use `await drainer_client.aio." + op + "(...)` with an AsyncConnection",
    )


def closed_error(conn: Any, op: str, e: BaseException) -> Optional[ConnectionClosed]:
    """The ConnectionClosed to raise for psycopg's error e, when e is about a closed or broken connection."""
    if isinstance(e, ConnectionClosed):
        return None
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)) and (conn.closed or conn.broken):
        return ConnectionClosed(f"{op}: the connection was closed or broke: {type(e).__name__}")
    return None


def _run(conn: "psycopg.Connection[Any]", op: str, fn: Callable[[], _T]) -> _T:
    """Run fn, turning psycopg's errors about a closed or broken connection into ConnectionClosed."""
    try:
        return fn()
    except (psycopg.OperationalError, psycopg.InterfaceError) as e:
        closed = closed_error(conn, op, e)
        if closed is not None:
            raise closed from e
        raise


def _fetchone(conn: "psycopg.Connection[Any]", stmt: Statement) -> Any:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(stmt.text, stmt.params)  # type: ignore[arg-type]
        return cur.fetchone()


def enqueue(
    conn: Any,
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

    ``conn`` may also be a SQLAlchemy ``Session`` (or ``scoped_session``)
    or ``Connection``: the same statement runs through SQLAlchemy's
    ``text()`` in its transaction (begun by SQLAlchemy if none is), and
    commits with ``session.commit()``. Refused (:class:`UsageError`): a 1.4
    ``Connection`` without ``future=True`` outside ``conn.begin()``, and a
    connection in ``isolation_level="AUTOCOMMIT"``. SQLAlchemy is never
    imported by the library itself.

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

    Errors of the database propagate as the driver raises them, and abort
    the caller's transaction (roll it back): same tuple with a different
    payload is ``psycopg.errors.UniqueViolation`` (SQLSTATE 23505, the
    message names the key; through SQLAlchemy ``sqlalchemy.exc.IntegrityError``
    with ``.orig.pgcode == "23505"``); under REPEATABLE READ or SERIALIZABLE a
    concurrent enqueue of the same tuple can raise
    ``psycopg.errors.SerializationFailure`` (40001), retried like any
    serialization failure.

    ``payload`` is the JSON value itself, built of dict, list, tuple, str,
    int, float, bool, None, aware ``datetime`` and ``date`` (see
    :func:`serialize_payload`); it becomes the body sent to the provider. A
    ``str`` payload is refused (:class:`PayloadError`): pass the object, not
    ``json.dumps(obj)``; wrap a deliberate JSON string as
    :class:`JSONString`. ``traceparent`` optionally continues the agent's W3C
    trace at dispatch.
    """
    sa = _sqla.sync_target(conn, "enqueue")
    call = prepare_enqueue(
        agent_run_id, step_id, tool_name, business_scope, payload, schema, max_payload_bytes, traceparent,
        _sqla.STYLE if sa is not None else PSYCOPG,
    )
    if sa is not None:
        return _sqla.enqueue(sa, call)
    _check_open(conn, "enqueue")
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise enqueue_would_autocommit("the connection is in autocommit mode outside any transaction")
    row = _run(conn, "enqueue", lambda: _fetchone(conn, call.statement))
    return enqueue_answer(call, row)


def result(conn: Any, key: str, *, schema: str = DEFAULT_SCHEMA) -> Optional[Outcome]:
    """Read the outcome of an intent through ``<schema>.result``.

    Returns ``(status, response, last_error)`` as an :class:`Outcome`, or
    ``None`` when no row with this key is visible to ``conn`` (not committed
    yet, rolled back, or unknown). A pruned row answers its final status with
    a ``None`` response. It runs in whatever transaction state ``conn`` is
    in, like any query (``conn`` may be a SQLAlchemy ``Session`` or
    ``Connection`` too); to wait for an outcome use :func:`wait`.
    """
    sa = _sqla.sync_target(conn, "result")
    stmt = prepare_result(key, schema, _sqla.STYLE if sa is not None else PSYCOPG)
    if sa is not None:
        return _sqla.result(sa, stmt)
    _check_open(conn, "result")
    return result_answer(_run(conn, "result", lambda: _fetchone(conn, stmt)))


def wait(
    conn: Any,
    key: str,
    timeout: float,
    *,
    schema: str = DEFAULT_SCHEMA,
    min_poll: float = DEFAULT_MIN_POLL,
    max_poll: float = DEFAULT_MAX_POLL,
) -> Outcome:
    """Wait until an intent is terminal or parked, and return its outcome.

    Returns the :class:`Outcome` once the status is terminal (``succeeded``,
    ``failed``, ``compensated``, ``cancelled``) or parked for a human
    (``outcome_unknown``, ``compensation_failed``); raises
    :class:`WaitTimeout` once ``timeout`` seconds have passed without that.

    drainer announces no outcome of a producer's rows (the schema's NOTIFY
    channels wake the daemon, and the MCP gateway for rows of ``mcp``
    routes only), so ``wait`` reads ``<schema>.result`` with a backoff: at
    once, then after ``min_poll`` seconds (0.05), the delay doubling up to
    ``max_poll`` (1.0), never sleeping past the deadline, with a last read
    begun at or after the deadline (also when an earlier read overran it).
    Each read is one lookup by the unique key, in its own
    short transaction, so no snapshot is held open while waiting.

    Call it outside any transaction, after committing the one that
    enqueued: the daemon cannot see an uncommitted intent, and a transaction
    would hold one snapshot that never sees the outcome change. A connection
    inside a transaction raises :class:`UsageError`. It works on autocommit
    connections and on ones that are not (each read is then committed: it
    writes nothing); the connection is left idle. With a SQLAlchemy
    ``Connection`` each read runs in ``conn.begin()``; with a ``Session``,
    on a connection of its bind, leaving the session untouched.
    """
    check_wait_args(key, timeout, min_poll, max_poll, schema)
    stmt = None
    sa = _sqla.sync_target(conn, "wait")
    if sa is not None:
        stmt = prepare_result(key, schema, _sqla.STYLE, "wait")
        _sqla.check_wait(sa, key)

        def read() -> Optional[Outcome]:
            return _sqla.read_once(sa, stmt)

    else:
        stmt = prepare_result(key, schema, PSYCOPG, "wait")
        _check_open(conn, "wait")
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise wait_inside_transaction(key)

        def txn() -> Optional[Outcome]:
            with conn.transaction():
                return result_answer(_fetchone(conn, stmt))

        def read() -> Optional[Outcome]:
            return _run(conn, "wait", txn)

    deadline = time.monotonic() + timeout
    sleeps = delays(min_poll, max_poll)
    while True:
        # The timeout is raised only after a read begun at or after the
        # deadline: a read that began earlier and overran it is not the
        # last look.
        began = time.monotonic()
        out = read()
        if out is not None and is_settled(out.status):
            return out
        if began >= deadline:
            raise WaitTimeout(key, float(timeout), None if out is None else out.status)
        time.sleep(max(0.0, min(next(sleeps), deadline - time.monotonic())))
