"""enqueue, result and wait through SQLAlchemy: in the caller's session or connection, and its transaction.

SQLAlchemy stays optional: nothing here imports it at module level. An
object is recognised as SQLAlchemy's only when SQLAlchemy is already
imported (the caller built the object with it), by looking its classes up in
``sys.modules``. The functions of this module take SQLAlchemy's synchronous
objects (``Session``, ``Connection``); the asynchronous ones
(``AsyncSession``, ``AsyncConnection``) reach them through their
``run_sync``, so sync and async run the same code, in the caller's
transaction. The statements and the reading of their rows are
:mod:`drainer_client._core`'s, as for psycopg.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from ._core import (
    SQLALCHEMY,
    EnqueueCall,
    Enqueued,
    Outcome,
    Statement,
    enqueue_answer,
    enqueue_would_autocommit,
    result_answer,
    wait_inside_transaction,
)
from ._errors import ConnectionClosed, UsageError

#: The parameter style of the statements run here.
STYLE = SQLALCHEMY

# (module, class) pairs, looked up in sys.modules only.
_SYNC_SESSION = (("sqlalchemy.orm", "Session"),)
_SYNC_SCOPED = (("sqlalchemy.orm", "scoped_session"),)
_SYNC_CONNECTION = (("sqlalchemy.engine", "Connection"),)
_SYNC_ENGINE = (("sqlalchemy.engine", "Engine"),)
_ASYNC_SESSION = (("sqlalchemy.ext.asyncio", "AsyncSession"),)
_ASYNC_SCOPED = (("sqlalchemy.ext.asyncio", "async_scoped_session"),)
_ASYNC_CONNECTION = (("sqlalchemy.ext.asyncio", "AsyncConnection"),)
_ASYNC_ENGINE = (("sqlalchemy.ext.asyncio", "AsyncEngine"),)


def _is(obj: object, classes: Tuple[Tuple[str, str], ...]) -> bool:
    for module, name in classes:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(obj, cls):
            return True
    return False


def _loaded() -> bool:
    return "sqlalchemy" in sys.modules


def sync_target(obj: object, op: str) -> Optional[Any]:
    """The SQLAlchemy ``Session`` or ``Connection`` obj is (a ``scoped_session`` gives its
    current session), or ``None`` when obj is not SQLAlchemy's."""
    if not _loaded():
        return None
    if _is(obj, _SYNC_SCOPED):
        obj = obj()  # type: ignore[operator]
    if _is(obj, _SYNC_SESSION) or _is(obj, _SYNC_CONNECTION):
        return obj
    if _is(obj, _ASYNC_SESSION) or _is(obj, _ASYNC_CONNECTION) or _is(obj, _ASYNC_SCOPED):
        raise UsageError(f"{op}: {type(obj).__name__} is asynchronous: use `await drainer_client.aio.{op}(...)`")
    if _is(obj, _SYNC_ENGINE) or _is(obj, _ASYNC_ENGINE):
        raise UsageError(
            f"{op}: pass a Session or a Connection, not an {type(obj).__name__}: "
            "the intent must commit in your transaction, which an Engine does not hold"
        )
    return None


def async_target(obj: object, op: str) -> Optional[Any]:
    """The SQLAlchemy ``AsyncSession`` or ``AsyncConnection`` obj is (an
    ``async_scoped_session`` gives its current session), or ``None`` when obj is not SQLAlchemy's."""
    if not _loaded():
        return None
    if _is(obj, _ASYNC_SCOPED):
        obj = obj()  # type: ignore[operator]
    if _is(obj, _ASYNC_SESSION) or _is(obj, _ASYNC_CONNECTION):
        return obj
    if _is(obj, _SYNC_SESSION) or _is(obj, _SYNC_CONNECTION) or _is(obj, _SYNC_SCOPED):
        raise UsageError(f"{op}: {type(obj).__name__} is synchronous: use `drainer_client.{op}(...)`, not drainer_client.aio")
    if _is(obj, _SYNC_ENGINE) or _is(obj, _ASYNC_ENGINE):
        raise UsageError(
            f"{op}: pass an AsyncSession or an AsyncConnection, not an {type(obj).__name__}: "
            "the intent must commit in your transaction, which an engine does not hold"
        )
    return None


def _text(stmt: Statement) -> Any:
    from sqlalchemy import text

    return text(stmt.text)


def _dbapi_autocommit(conn: Any) -> bool:
    """Whether the driver connection under a SQLAlchemy Connection commits every statement
    (isolation_level="AUTOCOMMIT", on the engine or the connection)."""
    fairy = conn.connection
    dbapi = getattr(fairy, "dbapi_connection", None) or getattr(fairy, "connection", None)
    return getattr(dbapi, "autocommit", False) is True


def _is_session(target: Any) -> bool:
    return _is(target, _SYNC_SESSION)


def _check_connection(conn: Any, op: str) -> None:
    if getattr(conn, "closed", False):
        raise ConnectionClosed(f"{op}: the connection is closed")


def _enqueue_connection(target: Any) -> Any:
    """The Connection an enqueue runs on, after refusing what would commit the intent on its own."""
    if _is_session(target):
        if getattr(target, "autocommit", False) is True and not target.in_transaction():
            raise enqueue_would_autocommit("the Session is in autocommit mode outside any transaction")
        conn = target.connection()
    else:
        conn = target
        _check_connection(conn, "enqueue")
        if not conn.in_transaction():
            import sqlalchemy.future

            if not isinstance(conn, sqlalchemy.future.Connection):
                # A 1.4 Connection without future=True begins no transaction
                # by itself: the statement would run in one rolled back at once.
                raise enqueue_would_autocommit("the SQLAlchemy Connection is not in a transaction (conn.begin())")
    if _dbapi_autocommit(conn):
        raise enqueue_would_autocommit('the SQLAlchemy connection is in isolation_level "AUTOCOMMIT"')
    return conn


def enqueue(target: Any, call: EnqueueCall) -> Enqueued:
    """Run a checked enqueue on a SQLAlchemy Session or Connection, in its transaction (begun if none is)."""
    conn = _enqueue_connection(target)
    row = conn.execute(_text(call.statement), call.statement.params).fetchone()
    return enqueue_answer(call, row)


def result(target: Any, stmt: Statement) -> Optional[Outcome]:
    """Read an outcome on a SQLAlchemy Session or Connection, in its current state."""
    if not _is_session(target):
        _check_connection(target, "result")
    row = target.execute(_text(stmt), stmt.params).fetchone()
    return result_answer(row)


def check_wait(target: Any, key: str) -> None:
    """Refuse to wait inside a transaction: the intent would not be committed yet."""
    if not _is_session(target):
        _check_connection(target, "wait")
    if target.in_transaction():
        raise wait_inside_transaction(key)


def read_once(target: Any, stmt: Statement) -> Optional[Outcome]:
    """One read of ``wait``, in a short transaction of its own.

    On a Connection: ``with conn.begin():``. A Session is left alone (no
    transaction begun in it, nothing of it expired): the read runs on a
    connection of the session's bind, returned to the pool at once.
    """
    if _is_session(target):
        bind = target.get_bind()
        if _is(bind, _SYNC_CONNECTION):
            target = bind
        else:
            with bind.begin() as conn:
                return result_answer(conn.execute(_text(stmt), stmt.params).fetchone())
    with target.begin():
        return result_answer(target.execute(_text(stmt), stmt.params).fetchone())
