"""drainer_client: the Python producer library of drainer.

An agent records "call this tool" intents in its own Postgres transaction,
so they commit (or roll back) together with its own state; the drainer
daemon (``drainer run``) then dispatches each one to its provider with a
stable idempotency key, and the agent reads the outcome back::

    import psycopg
    import drainer_client as dc

    with psycopg.connect(url) as conn:
        with conn.transaction():
            conn.execute("UPDATE invoices SET state = 'charging' WHERE id = %s", ["inv_555"])
            key, created = dc.enqueue(conn, run_id, "charge", "charge_card", "invoice:inv_555",
                                      {"invoice_id": "inv_555", "amount_cents": 500})
        status, response, last_error = dc.wait(conn, key, timeout=60)

Functions (docs/reference.md §9): :func:`idempotency_key`, :func:`enqueue`,
:func:`result`, :func:`wait`; for tool functions :func:`outbox_tool` with
:func:`agent_step`. The same API for asyncio is :mod:`drainer_client.aio`.
``conn`` may also be a SQLAlchemy ``Session`` or ``Connection`` (async:
``AsyncSession``, ``AsyncConnection``), whose transaction the intent joins;
SQLAlchemy is optional and never imported by the library.

The payload is the JSON value itself, never its text: a ``str`` payload is
refused (wrap a deliberate JSON string as :class:`JSONString`). An aware
``datetime`` in it is sent as JavaScript's ``toISOString`` writes it
(UTC, milliseconds, ``Z``), a ``date`` as ``YYYY-MM-DD``; a naive
``datetime`` is refused. Every function that touches the database takes
``schema=`` (default ``"drainer"``), the schema given to ``drainer migrate
--schema``. Errors: :class:`DrainerError` and its subclasses; the
database's own errors (e.g. ``psycopg.errors.UniqueViolation`` for a
different payload under the same tuple) propagate unchanged. The library
never logs, and no error message contains a payload.
"""

from ._client import (
    DEFAULT_SCHEMA,
    PARKED_STATUSES,
    TERMINAL_STATUSES,
    Enqueued,
    Outcome,
    enqueue,
    is_settled,
    result,
    wait,
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
from ._key import KEY_PREFIX, MAX_FIELD_BYTES, canonical_tuple, idempotency_key, validate_tuple
from ._payload import DEFAULT_MAX_PAYLOAD_BYTES, JSONString, serialize_payload
from ._tool import AgentStep, OutboxTool, agent_step, current_step, outbox_tool

__version__ = "0.1.0"

__all__ = [
    "AgentStep",
    "ConnectionClosed",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_SCHEMA",
    "DrainerError",
    "Enqueued",
    "InvalidTuple",
    "JSONString",
    "KEY_PREFIX",
    "MAX_FIELD_BYTES",
    "Outcome",
    "OutboxTool",
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
