"""drainer_client for asyncio: the same API on a psycopg 3 ``AsyncConnection``
(or a SQLAlchemy ``AsyncSession`` / ``AsyncConnection``).

Every function has the name, the arguments, the answers and the exceptions
of its synchronous twin in :mod:`drainer_client`; the ones that touch the
database are coroutines::

    import psycopg
    import drainer_client.aio as dca

    async with await psycopg.AsyncConnection.connect(url) as conn:
        async with conn.transaction():
            await conn.execute("UPDATE invoices SET state = 'charging' WHERE id = %s", ["inv_555"])
            key, created = await dca.enqueue(conn, run_id, "charge", "charge_card", "invoice:inv_555",
                                             {"invoice_id": "inv_555", "amount_cents": 500})
        status, response, last_error = await dca.wait(conn, key, timeout=60)

The statements, the checks of the arguments and the reading of the answers
are shared with the synchronous module (:mod:`drainer_client._core`), so
both store the same payload text and give the same answers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Optional, Tuple, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from . import _sqla
from ._client import closed_error
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
from ._errors import (
    ConnectionClosed,
    DrainerError,
    InvalidTuple,
    PayloadError,
    PayloadTooLarge,
    UsageError,
    WaitTimeout,
)
from ._key import KEY_PREFIX, canonical_tuple, idempotency_key, validate_tuple
from ._payload import DEFAULT_MAX_PAYLOAD_BYTES, JSONString, serialize_payload
from ._tool import AgentStep, OutboxTool, Scope, _decorator, agent_step, current_step

__all__ = [
    "AgentStep",
    "AsyncOutboxTool",
    "ConnectionClosed",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_SCHEMA",
    "DrainerError",
    "Enqueued",
    "InvalidTuple",
    "JSONString",
    "KEY_PREFIX",
    "Outcome",
    "PARKED_STATUSES",
    "PayloadError",
    "PayloadTooLarge",
    "TERMINAL_STATUSES",
    "UsageError",
    "WaitTimeout",
    "agent_step",
    "canonical_tuple",
    "current_step",
    "enqueue",
    "idempotency_key",
    "is_settled",
    "outbox_tool",
    "result",
    "serialize_payload",
    "validate_tuple",
    "wait",
]

_T = TypeVar("_T")


def _check_open(conn: Any, op: str) -> None:
    check_open(
        conn, op, psycopg.AsyncConnection,
        "a psycopg.AsyncConnection or a SQLAlchemy AsyncSession or AsyncConnection",
        psycopg.Connection, "use `drainer_client." + op + "(...)` with a synchronous Connection",
    )


async def _run(conn: "psycopg.AsyncConnection[Any]", op: str, fn: Callable[[], Awaitable[_T]]) -> _T:
    """Await fn(), turning psycopg's errors about a closed or broken connection into ConnectionClosed."""
    try:
        return await fn()
    except (psycopg.OperationalError, psycopg.InterfaceError) as e:
        closed = closed_error(conn, op, e)
        if closed is not None:
            raise closed from e
        raise


async def _fetchone(conn: "psycopg.AsyncConnection[Any]", stmt: Statement) -> Any:
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(stmt.text, stmt.params)  # type: ignore[arg-type]
        return await cur.fetchone()


async def enqueue(
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

    :func:`drainer_client.enqueue` on a ``psycopg.AsyncConnection``, or on a
    SQLAlchemy ``AsyncSession`` (or ``async_scoped_session``) or
    ``AsyncConnection``: the same checks (made before the connection is
    used), the same statement in the caller's transaction, the same answer
    ``(key, created)`` and the same exceptions. It never commits; on an
    autocommit connection call it inside ``async with conn.transaction():``.
    """
    sa = _sqla.async_target(conn, "enqueue")
    call = prepare_enqueue(
        agent_run_id, step_id, tool_name, business_scope, payload, schema, max_payload_bytes, traceparent,
        _sqla.STYLE if sa is not None else PSYCOPG,
    )
    if sa is not None:
        return await sa.run_sync(lambda s: _sqla.enqueue(s, call))  # type: ignore[no-any-return]
    _check_open(conn, "enqueue")
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise enqueue_would_autocommit("the connection is in autocommit mode outside any transaction")
    row = await _run(conn, "enqueue", lambda: _fetchone(conn, call.statement))
    return enqueue_answer(call, row)


async def result(conn: Any, key: str, *, schema: str = DEFAULT_SCHEMA) -> Optional[Outcome]:
    """Read the outcome of an intent: :func:`drainer_client.result` on an async connection.

    ``(status, response, last_error)`` as an :class:`Outcome`, or ``None``
    when no row with this key is visible; a plain query in the connection's
    current state.
    """
    sa = _sqla.async_target(conn, "result")
    stmt = prepare_result(key, schema, _sqla.STYLE if sa is not None else PSYCOPG)
    if sa is not None:
        return await sa.run_sync(lambda s: _sqla.result(s, stmt))  # type: ignore[no-any-return]
    _check_open(conn, "result")
    return result_answer(await _run(conn, "result", lambda: _fetchone(conn, stmt)))


async def wait(
    conn: Any,
    key: str,
    timeout: float,
    *,
    schema: str = DEFAULT_SCHEMA,
    min_poll: float = DEFAULT_MIN_POLL,
    max_poll: float = DEFAULT_MAX_POLL,
) -> Outcome:
    """Wait until an intent is terminal or parked: :func:`drainer_client.wait` for asyncio.

    Reads ``<schema>.result`` at once, then after ``min_poll`` seconds, the
    delay doubling up to ``max_poll``, never sleeping past the deadline, with
    a last read begun at or after the deadline (also when an earlier read
    overran it); between reads it awaits ``asyncio.sleep``,
    so other tasks run and the connection is idle. Each read runs in its own
    short transaction. :class:`WaitTimeout` after ``timeout`` seconds;
    :class:`UsageError` when called inside a transaction. Cancelling the
    task stops the wait.
    """
    check_wait_args(key, timeout, min_poll, max_poll, schema)
    read: Callable[[], Awaitable[Optional[Outcome]]]
    sa = _sqla.async_target(conn, "wait")
    if sa is not None:
        sa_stmt = prepare_result(key, schema, _sqla.STYLE, "wait")
        await sa.run_sync(lambda s: _sqla.check_wait(s, key))

        async def read() -> Optional[Outcome]:
            return await sa.run_sync(lambda s: _sqla.read_once(s, sa_stmt))  # type: ignore[no-any-return]

    else:
        stmt = prepare_result(key, schema, PSYCOPG, "wait")
        _check_open(conn, "wait")
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise wait_inside_transaction(key)

        async def txn() -> Optional[Outcome]:
            async with conn.transaction():
                return result_answer(await _fetchone(conn, stmt))

        async def read() -> Optional[Outcome]:
            return await _run(conn, "wait", txn)

    deadline = time.monotonic() + timeout
    sleeps = delays(min_poll, max_poll)
    while True:
        # The timeout is raised only after a read begun at or after the
        # deadline: a read that began earlier and overran it is not the
        # last look.
        began = time.monotonic()
        out = await read()
        if out is not None and is_settled(out.status):
            return out
        if began >= deadline:
            raise WaitTimeout(key, float(timeout), None if out is None else out.status)
        await asyncio.sleep(max(0.0, min(next(sleeps), deadline - time.monotonic())))


class AsyncOutboxTool(OutboxTool):
    """A tool function replaced by its intent, for async agents: what :func:`outbox_tool` returns.

    ``await tool(...)`` enqueues the call in the current :func:`agent_step`
    (whose connection is an async one) and returns the key;
    ``await tool.enqueue(...)`` returns ``(key, created)``. The body never runs.
    """

    async def enqueue(self, *args: Any, **kwargs: Any) -> Tuple[str, bool]:  # type: ignore[override]
        step, arguments, scope = self._intent(args, kwargs)
        key, created = await enqueue(
            step.conn,
            step.agent_run_id,
            step.step_id,
            self.tool_name,
            scope,
            arguments,
            schema=step.schema,
            max_payload_bytes=step.max_payload_bytes,
        )
        return key, created

    async def __call__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return (await self.enqueue(*args, **kwargs))[0]


def outbox_tool(tool_name: str, *, scope: Scope = None) -> Callable[[Callable[..., Any]], AsyncOutboxTool]:
    """:func:`drainer_client.outbox_tool` for async agents: calling the decorated function is awaited.

    ::

        @dca.outbox_tool("charge_card", scope=lambda invoice_id, **_: f"invoice:{invoice_id}")
        async def charge_card(invoice_id: str, amount_cents: int) -> None:
            ...  # never runs in the agent

        async with conn.transaction():
            with dca.agent_step(conn, run_id, "charge"):
                key = await charge_card(invoice_id="inv_555", amount_cents=500)

    Plain and coroutine functions may be decorated (the body never runs).
    :func:`agent_step` is the same context manager as the synchronous one
    (it does no I/O), used with a plain ``with``.
    """
    return _decorator(tool_name, scope, AsyncOutboxTool, allow_coroutine=True)
