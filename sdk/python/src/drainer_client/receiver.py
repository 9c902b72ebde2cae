"""The idempotency receiver for ASGI services (docs/receiver.md).

The provider's half of drainer's contract (docs/reference.md §11): ASGI
middleware that makes an app answer the retries of one idempotency key with
one effect and a byte-identical stored answer. It keeps its records in
Postgres with the same table layout, fingerprint and request flow as the Go
package ``receiver`` and the TypeScript ``@drainer/client/receiver``, so
services in all three languages can share one store::

    from drainer_client.receiver import Receiver

    receiver = Receiver(os.environ["DATABASE_URL"], in_transaction=True, scope=lambda s: account_of(s))
    receiver.migrate()
    app = receiver.wrap(app)        # any ASGI app, under any ASGI server
    # the app writes its effect through current_connection(scope)

Options (keyword arguments of :class:`Receiver`): ``schema``
(``"drainer_receiver"``), ``key_header`` (``"Idempotency-Key"``), ``ttl``
(seconds, 86400), ``recovery_timeout`` (seconds, 60),
``idle_in_transaction_timeout`` (seconds, 60; negative: not set), ``scope`` (a function
of the ASGI scope returning the key space, default one global scope),
``mode`` (``"seed"`` or ``"ietf"``), ``require_key`` (a function of the ASGI
scope; default POST, PUT, PATCH and DELETE), ``max_body`` (bytes, 1 MiB),
``store_server_errors`` (False), ``store_headers`` (response headers stored
besides Content-Type and Location), ``in_transaction`` (False: see
:func:`current_connection`; the recommended setting), ``rerun_abandoned``
(False), ``logger`` (default ``logging.getLogger("drainer_client.receiver")``),
``pool_size`` (connections kept when given a conninfo string, 10; a
request waits at most 30 s for one of them).

With ``in_transaction=True`` the record is written in the transaction the
app writes its effect through, so a process that dies mid-request rolls
both back and a retry runs the app again. Without it, a request whose
process died leaves an in-flight record; after the recovery timeout a retry
gets 409 ``Idempotency-Conflict: outcome-unknown``, the app does not run
again, and the record is reported (an ERROR log line naming scope and key,
and the counter ``drainer_receiver_abandoned_total`` of :meth:`Receiver.metrics`)
for a person, unless ``rerun_abandoned=True`` declares the app safe to run
twice.

With ``in_transaction=True`` the transaction also sets Postgres's
``idle_in_transaction_session_timeout`` to ``idle_in_transaction_timeout``
(``SET LOCAL``): when the service freezes, is cut off or vanishes
mid-request, the server ends its session after that long without a
statement, rolling back the record and the effect, so the key is free again
(without it Postgres holds them until it notices the dead connection, by
default about two hours). An app that goes that long without a statement in
its transaction (waiting on another service) loses its session too: nothing
of it commits. Raise it for such an app; a negative value leaves the
server's setting.

A client that hangs up after its key was claimed cancels nothing: the app
gets ``http.disconnect`` when it asks for it, and is not cancelled; an answer
it still sends is stored (and committed) and a retry gets it, while the
answer itself is dropped if the server's ``send`` raises ``OSError`` for the
closed connection. An ASGI server or framework that cancels the app when the
client leaves cancels the request: its record is released, or its
transaction rolled back.

All time decisions use the database clock. The body is read in full (every
``http.request`` chunk) before anything is decided.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import re
import sys
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Sequence, Tuple

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from ._jcs import canonical_json
from ._key import KEY_PREFIX, TUPLE_FIELDS, idempotency_key

__all__ = [
    "DEFAULT_SCHEMA",
    "MAX_KEY_BYTES",
    "Receiver",
    "canonical_body",
    "current_connection",
    "fingerprint",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_SCHEMA = "drainer_receiver"
DEFAULT_KEY_HEADER = "Idempotency-Key"
DEFAULT_TTL = 24 * 3600.0
DEFAULT_RECOVERY_TIMEOUT = 60.0
DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT = 60.0
_MAX_INT32 = 2 ** 31 - 1
DEFAULT_MAX_BODY = 1 << 20
#: The longest accepted idempotency key, in bytes of UTF-8.
MAX_KEY_BYTES = 255
SEED, IETF = "seed", "ietf"

_MIGRATE_LOCK = "drainer_receiver.migrate"
_PRUNE_BATCH = 1000
_PROBLEM_BASE = "https://drainer.dev/problems/"
_KEYED_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]*$")
#: A key of drainer's scheme ("idem_v<digits>_…", docs/reference.md §1); group 1 its version.
_KEY_VERSION = re.compile(r"idem_(v[0-9]+)_")
#: SQLSTATEs of a transaction the database aborted to keep concurrent
#: transactions apart (under REPEATABLE READ or SERIALIZABLE, or a
#: deadlock): nothing of it committed, and running it again is safe.
_SERIALIZATION_FAILURE, _DEADLOCK_DETECTED = "40001", "40P01"
#: How long a request waits for a connection of the receiver's own pool (a
#: conninfo) before it gives up (as psycopg_pool's default timeout, and the
#: Go receiver's bound on the claim).
_POOL_TIMEOUT = 30.0
#: The ASGI scope entry holding the in_transaction connection.
CONNECTION_SCOPE_KEY = "drainer_receiver.connection"
_CLAIM_ROUNDS = 3
#: The outcome label values of drainer_receiver_abandoned_total.
_ABANDONED_OUTCOMES = ("outcome_unknown", "rerun")

_MIGRATE_SQL = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.records (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    fingerprint   bytea       NOT NULL,
    state         text        NOT NULL,
    locked_until  timestamptz,
    status        integer,
    headers       jsonb,
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key),
    CONSTRAINT records_state CHECK (state IN ('in_flight', 'completed', 'outcome_unknown'))
);
CREATE INDEX IF NOT EXISTS records_expires_idx ON {schema}.records (expires_at);
"""

# Whether the store is as this version creates it (the records table, %(table)s,
# with its state check and its expiry index, %(index)s): read from the catalog
# only, taking no lock on the table. migrate() runs no DDL when it is:
# CREATE INDEX IF NOT EXISTS, for one, locks the table before it finds the
# index, and would queue behind (and hold up) every request being served.
_CURRENT_SQL = ("SELECT to_regclass(%(table)s) IS NOT NULL AND to_regclass(%(index)s) IS NOT NULL "
                "AND EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass(%(table)s) "
                "AND conname = 'records_state')")

# A store created before the outcome_unknown state had the unnamed check
# records_state_check; every row passes the wider one.
_HAS_STATES_SQL = ("SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass "
                   "AND conname = 'records_state')")
_UPGRADE_STATES_SQL = """ALTER TABLE {schema}.records DROP CONSTRAINT IF EXISTS records_state_check,
    ADD CONSTRAINT records_state CHECK (state IN ('in_flight', 'completed', 'outcome_unknown'))"""

# The claim inserts only while holding the key's claim lock (the same one
# as the Go and TypeScript receivers'): a record being inserted by an open
# in_transaction run holds it, so a concurrent request answers in-flight
# instead of waiting for that run to end.
_CLAIM_SQL = (
    "INSERT INTO {} (scope, key, fingerprint, state, locked_until, expires_at) "
    "SELECT %(scope)s, %(key)s, %(fp)s, 'in_flight', now() + %(rec)s::bigint * interval '1 microsecond', "
    "now() + %(ttl)s::bigint * interval '1 microsecond' "
    "WHERE pg_try_advisory_xact_lock(hashtextextended(%(schema)s::text || chr(10) || %(scope)s::text || chr(10) "
    "|| %(key)s::text, 0)) "
    "ON CONFLICT (scope, key) DO NOTHING RETURNING locked_until"
)


def _is_json(content_type: str) -> bool:
    mt = content_type.split(";", 1)[0].strip().lower()
    return mt == "application/json" or (mt.startswith("application/") and mt.endswith("+json"))


def canonical_body(content_type: str, body: bytes) -> bytes:
    """The body as the fingerprint sees it: JCS canonical JSON for a JSON
    content type whose body parses as strict JSON, else the bytes unchanged."""
    if not _is_json(content_type):
        return body
    c = canonical_json(body)
    return body if c is None else c


def fingerprint(method: str, path: str, content_type: str, body: bytes) -> bytes:
    """SHA-256 over METHOD "\\n" PATH "\\n" BODY (docs/receiver.md): the same
    bytes as the Go receiver's ``receiver.Fingerprint``."""
    h = hashlib.sha256()
    h.update(method.upper().encode("utf-8"))
    h.update(b"\n")
    h.update(path.encode("utf-8"))
    h.update(b"\n")
    h.update(canonical_body(content_type, body))
    return h.digest()


def check_key(key: str) -> Optional[str]:
    """Why key is not acceptable (1 to 255 bytes of UTF-8, no control
    characters), or None."""
    if key == "":
        return "the key is empty"
    n = len(key.encode("utf-8", "surrogatepass"))
    if n > MAX_KEY_BYTES:
        return f"the key is {n} bytes, more than the limit of {MAX_KEY_BYTES}"
    for i, ch in enumerate(key):
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"the key contains a control character at index {i}"
    return None


def _renewable(expired: bool, state: str, recoverable: bool) -> bool:
    """Whether an expired record makes the request a new first request (as
    the Go receiver's renewable): a completed or outcome_unknown record, or
    an in-flight one past its recovery deadline (its process stopped). An
    in-flight record whose deadline is ahead is still running (its deadline
    moves forward while the app runs) and answers as it did before its TTL
    passed; overwriting it would run the app a second time beside the
    first."""
    return bool(expired) and (state != "in_flight" or bool(recoverable))


def _check_tuple(values: List[bytes], key: str) -> Optional[str]:
    if len(values) > 1:
        return f"the header appears {len(values)} times"
    raw = values[0].decode("latin-1")
    if not _BASE64URL.match(raw) or len(raw) % 4 == 1:
        return "not unpadded base64url"
    try:
        decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        obj = json.loads(decoded.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeError):
        return "not the JSON object of the four tuple fields"
    if not isinstance(obj, dict) or any(k not in TUPLE_FIELDS or not isinstance(v, str) for k, v in obj.items()):
        return "not the JSON object of the four tuple fields"
    try:
        recomputed = idempotency_key(*(obj.get(f, "") for f in TUPLE_FIELDS))
    except Exception:  # a lone surrogate: no key
        return "not the JSON object of the four tuple fields"
    if recomputed != key:
        return "the key recomputed from the tuple differs from the request's key"
    return None


def current_connection(scope: Scope) -> "Optional[psycopg.AsyncConnection[Any]]":
    """The connection whose open transaction a keyed request's app runs in
    when the receiver has ``in_transaction=True``, else None. What the app
    writes through it commits together with the stored answer; the app must
    not commit or roll back itself."""
    return scope.get(CONNECTION_SCOPE_KEY)


class _Problem(Exception):
    def __init__(self, status: int, slug: str, title: str, detail: str, headers: Sequence[Tuple[str, str]] = (),
                 key: Optional[str] = None):
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail, self.headers = status, slug, title, detail, list(headers)
        self.key = key  # the idempotency key, where a person needs it (outcome-unknown)

    async def send(self, send: Send) -> None:
        doc: Dict[str, Any] = {"type": _PROBLEM_BASE + self.slug, "title": self.title, "status": self.status,
                               "detail": self.detail}
        if self.key is not None:
            doc["idempotency_key"] = self.key
        body = json.dumps(doc).encode("utf-8")
        headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _unavailable(detail: str) -> _Problem:
    return _Problem(503, "unavailable", "Idempotency store unavailable", detail, [("Retry-After", "1")])


def _serialization_failure(err: BaseException) -> Optional[_Problem]:
    """503 serialization-failure when err is a serialization failure
    (40001) or a deadlock (40P01), else None."""
    code = getattr(err, "sqlstate", None)
    if code not in (_SERIALIZATION_FAILURE, _DEADLOCK_DETECTED):
        return None
    what = "a deadlock" if code == _DEADLOCK_DETECTED else "a serialization failure"
    return _Problem(503, "serialization-failure", "Transaction conflict",
                    f"the database aborted the request's transaction with {what} (SQLSTATE {code}): it conflicted "
                    "with a concurrent transaction; nothing was committed, and it is safe to retry with the same key",
                    [("Retry-After", "1")])


class _PoolTimeout(psycopg.OperationalError):
    """No connection of the receiver's own pool came free within its
    timeout (as psycopg_pool's PoolTimeout). exhausted: every one of its
    size connections was in use when it gave up."""

    def __init__(self, size: int, timeout: float, exhausted: bool):
        super().__init__(f"no connection of the receiver's pool came free within {timeout:g} s")
        self.size, self.timeout, self.exhausted = size, timeout, exhausted


class _Pool:
    """A few autocommit AsyncConnections kept open, for a conninfo string."""

    def __init__(self, conninfo: str, size: int):
        self.conninfo, self.size = conninfo, size
        #: How long a lease waits for a connection before _PoolTimeout.
        self.timeout = _POOL_TIMEOUT
        self.idle: List["psycopg.AsyncConnection[Any]"] = []
        self.sem: Optional[asyncio.Semaphore] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    def connection(self) -> "_Lease":
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            # Connections and the semaphore belong to one event loop: a new
            # loop (another asyncio.run) starts afresh.
            for c in self.idle:
                c.pgconn.finish()
            self.idle, self.sem, self.loop = [], asyncio.Semaphore(self.size), loop
        return _Lease(self)

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for c in idle:
            await c.close()


class _Lease:
    def __init__(self, pool: _Pool):
        self.pool = pool
        self.conn: "Optional[psycopg.AsyncConnection[Any]]" = None

    async def __aenter__(self) -> "psycopg.AsyncConnection[Any]":
        p = self.pool
        assert p.sem is not None
        try:
            await asyncio.wait_for(p.sem.acquire(), p.timeout)
        except asyncio.TimeoutError:
            raise _PoolTimeout(p.size, p.timeout, p.sem.locked()) from None
        try:
            while p.idle:
                c = p.idle.pop()
                if not c.closed:
                    self.conn = c
                    return c
            self.conn = await psycopg.AsyncConnection.connect(p.conninfo, autocommit=True)
            return self.conn
        except BaseException:
            p.sem.release()
            raise

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        p, c = self.pool, self.conn
        assert p.sem is not None
        try:
            if c is not None:
                if et is None and not c.closed and c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    p.idle.append(c)
                else:
                    await c.close()
        finally:
            p.sem.release()


class Receiver:
    """Postgres-backed idempotency middleware for ASGI apps.

    ``conninfo_or_pool`` is a libpq connection string or URL (the receiver
    keeps up to ``pool_size`` connections of its own), or an object with an
    async ``connection()`` context manager yielding an AsyncConnection in
    autocommit mode (e.g. ``psycopg_pool.AsyncConnectionPool`` created with
    ``kwargs={"autocommit": True}``).
    """

    def __init__(
        self,
        conninfo_or_pool: Any,
        *,
        schema: str = DEFAULT_SCHEMA,
        key_header: str = DEFAULT_KEY_HEADER,
        ttl: float = DEFAULT_TTL,
        recovery_timeout: float = DEFAULT_RECOVERY_TIMEOUT,
        idle_in_transaction_timeout: float = DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
        scope: Optional[Callable[[Scope], str]] = None,
        mode: str = SEED,
        require_key: Optional[Callable[[Scope], bool]] = None,
        max_body: int = DEFAULT_MAX_BODY,
        store_server_errors: bool = False,
        store_headers: Sequence[str] = (),
        in_transaction: bool = False,
        rerun_abandoned: bool = False,
        logger: Optional[logging.Logger] = None,
        pool_size: int = 10,
    ):
        problems = []
        if not schema or "\x00" in schema or len(schema.encode("utf-8")) > 63:
            problems.append(f"schema {schema!r} must be 1 to 63 bytes without NUL")
        if not key_header:
            problems.append("key_header must not be empty")
        if not ttl or ttl < 0.001:
            problems.append(f"ttl is {ttl!r}, must be at least 0.001 seconds")
        if not recovery_timeout or recovery_timeout < 0.001:
            problems.append(f"recovery_timeout is {recovery_timeout!r}, must be at least 0.001 seconds")
        idle_ms: Optional[int] = None
        if not idle_in_transaction_timeout < 0:
            if not 0.001 <= idle_in_transaction_timeout <= _MAX_INT32 / 1000:
                problems.append(f"idle_in_transaction_timeout is {idle_in_transaction_timeout!r}, must be from 0.001 to "
                                f"{_MAX_INT32 / 1000} seconds (or negative: not set)")
            else:
                idle_ms = max(1, round(idle_in_transaction_timeout * 1000))
        if mode not in (SEED, IETF):
            problems.append(f"mode is {mode!r}, must be {SEED!r} or {IETF!r}")
        if max_body < 0:
            problems.append(f"max_body is {max_body}, must not be negative")
        if pool_size < 1:
            problems.append(f"pool_size is {pool_size}, must be at least 1")
        if problems:
            raise ValueError("drainer_client.receiver: " + "; ".join(problems))
        if isinstance(conninfo_or_pool, str):
            self._conninfo: Optional[str] = conninfo_or_pool
            self._pool: Any = _Pool(conninfo_or_pool, pool_size)
        elif hasattr(conninfo_or_pool, "connection"):
            self._conninfo = getattr(conninfo_or_pool, "conninfo", None)
            self._pool = conninfo_or_pool
        else:
            raise TypeError("drainer_client.receiver: Receiver needs a conninfo string or a pool with connection()")
        self.schema = schema
        self.key_header = key_header.lower().encode("latin-1")
        self._key_header_name = key_header
        self.ttl_us = int(ttl * 1_000_000)
        self.recovery_us = int(recovery_timeout * 1_000_000)
        # Run first in an in_transaction request's transaction: the server
        # ends the session of a service that stopped mid-request after that
        # long without a statement, which rolls the record back and frees
        # the key. None: the server's setting applies.
        self._idle_sql: Optional[sql.Composed] = None if idle_ms is None else sql.SQL(
            "SET LOCAL idle_in_transaction_session_timeout = {}").format(sql.Literal(idle_ms))
        self.scope = scope or (lambda s: "")
        self.mode = mode
        self.require_key = require_key or (lambda s: s.get("method", "").upper() in _KEYED_METHODS)
        self.max_body = max_body or DEFAULT_MAX_BODY
        self.store_server_errors = store_server_errors
        self.store_headers = {b"content-type", b"location"} | {h.lower().encode("latin-1") for h in store_headers}
        self.in_transaction = in_transaction
        self.rerun_abandoned = rerun_abandoned
        self.logger = logger or logging.getLogger("drainer_client.receiver")
        #: drainer_receiver_abandoned_total by outcome: "outcome_unknown"
        #: (answered 409, left for a person) and "rerun" (rerun_abandoned).
        self.abandoned_total: Dict[str, int] = {o: 0 for o in _ABANDONED_OUTCOMES}
        self._table = sql.SQL("{}.records").format(sql.Identifier(schema))

    async def aclose(self) -> None:
        """Close the idle connections the receiver keeps (for a conninfo)."""
        if isinstance(self._pool, _Pool):
            await self._pool.close()

    # -- store ---------------------------------------------------------------

    def _migrate_statements(self) -> sql.Composed:
        return sql.SQL(_MIGRATE_SQL).format(schema=sql.Identifier(self.schema))

    def _table_name(self) -> str:
        """The records table's quoted name, as ::regclass reads it."""
        return '"' + self.schema.replace('"', '""') + '".records'

    def _current_params(self) -> Dict[str, str]:
        quoted = '"' + self.schema.replace('"', '""') + '"'
        return {"table": quoted + ".records", "index": quoted + ".records_expires_idx"}

    def migrate(self) -> None:
        """Create the schema, table and index if missing, and upgrade a table
        created by an earlier version in place (safe from many processes at
        once). On an up-to-date store it runs no DDL and takes no lock on the
        records table. Synchronous: call it at startup. With a pool that has
        no ``conninfo``, use :meth:`amigrate`."""
        if not self._conninfo:
            raise TypeError("drainer_client.receiver: migrate() needs a conninfo; await amigrate() instead")
        with psycopg.connect(self._conninfo) as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_MIGRATE_LOCK])
                current = conn.execute(_CURRENT_SQL, self._current_params()).fetchone()
                if current and current[0]:
                    return
                conn.execute(self._migrate_statements())
                row = conn.execute(_HAS_STATES_SQL, [self._table_name()]).fetchone()
                if not (row and row[0]):
                    conn.execute(sql.SQL(_UPGRADE_STATES_SQL).format(schema=sql.Identifier(self.schema)))

    async def amigrate(self) -> None:
        """:meth:`migrate` on the receiver's own connections."""
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_MIGRATE_LOCK])
                current = await (await conn.execute(_CURRENT_SQL, self._current_params())).fetchone()
                if current and current[0]:
                    return
                await conn.execute(self._migrate_statements())
                row = await (await conn.execute(_HAS_STATES_SQL, [self._table_name()])).fetchone()
                if not (row and row[0]):
                    await conn.execute(sql.SQL(_UPGRADE_STATES_SQL).format(schema=sql.Identifier(self.schema)))

    def metrics(self) -> str:
        """The receiver's counter in the Prometheus text format, to serve
        (or append to what is served) at /metrics."""
        lines = [
            "# HELP drainer_receiver_abandoned_total Keyed requests whose process stopped mid-request outside "
            "in_transaction, found by a retry after the recovery timeout: outcome_unknown (answered 409, left "
            "for a person) or rerun (rerun_abandoned).",
            "# TYPE drainer_receiver_abandoned_total counter",
        ]
        lines += [f'drainer_receiver_abandoned_total{{outcome="{o}"}} {self.abandoned_total[o]}'
                  for o in _ABANDONED_OUTCOMES]
        return "\n".join(lines) + "\n"

    def _report_abandoned(self, scope: str, key: str, rerun: bool) -> None:
        """Count and log a record whose request stopped mid-run, with its
        scope and key (a person resolves an unknown outcome by the key)."""
        if rerun:
            self.abandoned_total["rerun"] += 1
            self.logger.warning("receiver: a request stopped mid-run; its handler runs again (rerun_abandoned) "
                                "schema=%r scope=%r key=%r", self.schema, scope, key)
            return
        self.abandoned_total["outcome_unknown"] += 1
        self.logger.error("receiver: a request stopped mid-run and its effect may exist; retries are answered 409 "
                          "outcome-unknown until a person resolves the record schema=%r scope=%r key=%r",
                          self.schema, scope, key)

    async def prune(self) -> int:
        """Delete expired records in batches of 1000 until none is left;
        return how many were deleted."""
        q = sql.SQL(
            "DELETE FROM {t} WHERE (scope, key) IN (SELECT scope, key FROM {t} WHERE expires_at <= now() "
            "LIMIT {n} FOR UPDATE SKIP LOCKED)"
        ).format(t=self._table, n=sql.Literal(_PRUNE_BATCH))
        total = 0
        async with self._pool.connection() as conn:
            while True:
                cur = await conn.execute(q)
                total += cur.rowcount
                if cur.rowcount < _PRUNE_BATCH:
                    return total

    async def _claim(self, scope: str, key: str, fp: bytes) -> Tuple[str, Any, bool]:
        """Step 2 of the flow, in short transactions of its own: (outcome,
        data, abandoned) as :meth:`_claim_round` decides."""
        async with self._pool.connection() as conn:
            for _ in range(_CLAIM_ROUNDS):
                try:
                    async with conn.transaction():
                        decided = await self._claim_round(conn, scope, key, fp)
                except pg_errors.LockNotAvailable:
                    return "in_flight", None, False
                if decided is not None:
                    return decided
        return "in_flight", None, False

    async def _claim_in(self, conn: Any, scope: str, key: str, fp: bytes) -> Tuple[str, Any, bool]:
        """The claim inside the open transaction of conn, the one the app then
        runs in (in_transaction): the record is written uncommitted, so it
        commits with the app's effect or not at all. LockNotAvailable leaves
        the transaction aborted."""
        for _ in range(_CLAIM_ROUNDS):
            decided = await self._claim_round(conn, scope, key, fp)
            if decided is not None:
                return decided
        return "in_flight", None, False

    async def _claim_round(self, conn: Any, scope: str, key: str, fp: bytes) -> Optional[Tuple[str, Any, bool]]:
        """One round of the claim in conn's transaction: ("claimed", token),
        ("replay", (status, headers, body)), ("mismatch", None), ("in_flight",
        None) or ("outcome_unknown", None), and whether this round found the
        record of a request that stopped mid-run (it marked it
        outcome_unknown, or took it over with rerun_abandoned): the caller
        reports it once committed. None: no record to decide from (try
        again)."""
        t = self._table
        cur = await conn.execute(
            sql.SQL(_CLAIM_SQL).format(t),
            {"scope": scope, "key": key, "fp": fp, "rec": self.recovery_us, "ttl": self.ttl_us, "schema": self.schema},
        )
        row = await cur.fetchone()
        if row is not None:
            return "claimed", row[0], False
        # A plain read decides a replay, a mismatch or an in-flight answer;
        # only an overwrite (of a renewable record), a takeover or marking an
        # abandoned record reads again under the row lock (NOWAIT: a locked
        # record is being worked on right now).
        for lock in ("", " FOR UPDATE NOWAIT"):
            cur = await conn.execute(
                sql.SQL(
                    "SELECT fingerprint, state, expires_at <= now(), "
                    "coalesce(locked_until <= now(), false), status, headers, body "
                    "FROM {} WHERE scope = %s AND key = %s" + lock
                ).format(t),
                [scope, key],
            )
            row = await cur.fetchone()
            if row is None:
                return None  # deleted meanwhile, or being inserted: try again
            stored_fp, state, expired, recoverable, status, headers, body = row
            same = bytes(stored_fp) == fp
            renew = _renewable(expired, state, recoverable)
            if not lock and (renew or (same and state == "in_flight" and recoverable)):
                continue
            break
        if renew:
            # An expired key is a new first request, unless its first request
            # is still running (see _renewable).
            cur = await conn.execute(
                sql.SQL(
                    "UPDATE {} SET fingerprint = %s, state = 'in_flight', "
                    "locked_until = now() + %s::bigint * interval '1 microsecond', status = NULL, "
                    "headers = NULL, body = NULL, created_at = now(), completed_at = NULL, "
                    "expires_at = now() + %s::bigint * interval '1 microsecond' "
                    "WHERE scope = %s AND key = %s RETURNING locked_until"
                ).format(t),
                [fp, self.recovery_us, self.ttl_us, scope, key],
            )
            return "claimed", (await cur.fetchone())[0], False  # type: ignore[index]
        if not same:
            return "mismatch", None, False
        if state == "completed":
            return "replay", (status if status is not None else 200, headers or {}, bytes(body or b"")), False
        if state == "outcome_unknown":
            return "outcome_unknown", None, False
        if not recoverable:
            return "in_flight", None, False
        if self.rerun_abandoned:
            # The first request's process stopped mid-run and the service
            # declared the app safe to run again: take the record over.
            cur = await conn.execute(
                sql.SQL(
                    "UPDATE {} SET locked_until = now() + %s::bigint * interval '1 microsecond' "
                    "WHERE scope = %s AND key = %s RETURNING locked_until"
                ).format(t),
                [self.recovery_us, scope, key],
            )
            return "claimed", (await cur.fetchone())[0], True  # type: ignore[index]
        # Its effect may exist: keep the record for a person. locked_until
        # stays, so a first app that was only cut off from the database can
        # still complete (or release) it.
        await conn.execute(
            sql.SQL("UPDATE {} SET state = 'outcome_unknown' WHERE scope = %s AND key = %s").format(t), [scope, key]
        )
        return "outcome_unknown", None, True

    async def _complete(self, conn: Any, scope: str, key: str, token: Any, status: int,
                        headers: Dict[str, List[str]], body: bytes) -> bool:
        cur = await conn.execute(
            sql.SQL(
                "UPDATE {} SET state = 'completed', locked_until = NULL, status = %s, headers = %s::jsonb, body = %s, "
                "completed_at = now() WHERE scope = %s AND key = %s AND state IN ('in_flight', 'outcome_unknown') "
                "AND locked_until = %s"
            ).format(self._table),
            [status, json.dumps(headers), body, scope, key, token],
        )
        return cur.rowcount == 1

    async def _release(self, scope: str, key: str, token: Any) -> None:
        try:
            async with self._pool.connection() as conn:
                await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE scope = %s AND key = %s AND state IN ('in_flight', 'outcome_unknown') "
                            "AND locked_until = %s").format(self._table),
                    [scope, key, token],
                )
        except psycopg.Error:
            pass  # the record expires after the recovery timeout instead

    # -- ASGI ----------------------------------------------------------------

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """Return app behind the receiver, as an ASGI app."""

        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if scope.get("type") != "http" or not self.require_key(scope):
                await app(scope, receive, send)
                return
            await self._serve(app, scope, receive, send)

        return wrapped

    def _header_values(self, scope: Scope, name: bytes) -> List[bytes]:
        return [v for k, v in scope.get("headers", []) if k.lower() == name]

    def _key(self, scope: Scope) -> str:
        vals = self._header_values(scope, self.key_header)
        name = self._key_header_name
        if not vals or (len(vals) == 1 and vals[0] == b""):
            raise _Problem(400, "missing-key", "Idempotency key missing",
                           f"this request needs an idempotency key in header {name}")
        if len(vals) > 1:
            raise _Problem(400, "invalid-key", "Invalid idempotency key",
                           f"header {name} appears {len(vals)} times; send it once")
        try:
            key = vals[0].decode("utf-8")
        except UnicodeDecodeError:
            raise _Problem(400, "invalid-key", "Invalid idempotency key",
                           f"header {name}: the key is not valid UTF-8") from None
        why = check_key(key)
        if why:
            raise _Problem(400, "invalid-key", "Invalid idempotency key", f"header {name}: {why}")
        tuple_vals = self._header_values(scope, b"x-agent-idempotency-tuple")
        if tuple_vals:
            m = _KEY_VERSION.match(key)
            if m and not key.startswith(KEY_PREFIX):
                v, known = m.group(1), KEY_PREFIX[len("idem_"):-1]
                raise _Problem(400, "unsupported-key-version", "Unsupported idempotency key version",
                               f"header {name}: the key is of version {v} (idem_{v}_), which this receiver does not "
                               f"know: it checks X-Agent-Idempotency-Tuple against keys of version {known} "
                               f"({KEY_PREFIX}) only")
            why = _check_tuple(tuple_vals, key)
            if why:
                raise _Problem(400, "tuple-mismatch", "Idempotency tuple does not match the key",
                               f"header X-Agent-Idempotency-Tuple: {why}")
        return key

    async def _read_body(self, scope: Scope, receive: Receive) -> Optional[bytes]:
        """The whole body (every chunk); None if the client went away."""
        for v in self._header_values(scope, b"content-length"):
            try:
                if int(v) > self.max_body:
                    raise self._too_large()
            except ValueError:
                pass
        chunks: List[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            if msg["type"] != "http.request":
                continue
            chunk = msg.get("body", b"") or b""
            size += len(chunk)
            if size > self.max_body:
                raise self._too_large()
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> _Problem:
        return _Problem(413, "too-large", "Request body too large",
                        f"the request body is larger than the limit of {self.max_body} bytes")

    async def _serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await self._read_body(scope, receive)
            if body is None:
                return
            key = self._key(scope)
            rscope = self.scope(scope)
            if not isinstance(rscope, str) or "\x00" in rscope:
                raise _Problem(400, "invalid-scope", "Invalid scope", "the request's scope is not a str without NUL")
            ctype = b"".join(self._header_values(scope, b"content-type")[:1]).decode("latin-1")
            raw_path = scope.get("raw_path")
            path = raw_path.split(b"?", 1)[0].decode("latin-1") if raw_path else _quote_path(scope.get("path", "/"))
            fp = fingerprint(scope.get("method", ""), path, ctype, body)
            if not self.in_transaction:
                try:
                    outcome, data, abandoned = await self._claim(rscope, key, fp)
                except (psycopg.Error, OSError) as e:
                    raise self._store_failure(e, False, "the idempotency store could not be reached; the request was "
                                              "not processed, retry it with the same key") from None
                if abandoned:
                    self._report_abandoned(rscope, key, outcome == "claimed")
                if outcome != "claimed":
                    await self._refuse(send, key, outcome, data)
                    return
        except _Problem as p:
            await p.send(send)
            return
        if self.in_transaction:
            await self._serve_in_transaction(app, scope, receive, send, body, rscope, key, fp)
        else:
            await self._run(app, scope, receive, send, body, rscope, key, data)

    def _store_failure(self, err: BaseException, pool_wait: bool, detail: str) -> _Problem:
        """The 503 of a store step that failed with err, so drainer retries
        with the same key, naming the cause where it is known: a
        serialization failure or deadlock; or, when pool_wait (an
        in_transaction request, whose connection is held for its whole app)
        and the pool gave up waiting for a connection while every one was in
        use, an exhausted pool. Otherwise unavailable with detail."""
        p = _serialization_failure(err)
        if p is None and pool_wait:
            p = self._pool_exhausted(err)
        return p if p is not None else _unavailable(detail)

    def _pool_exhausted(self, err: BaseException) -> Optional[_Problem]:
        """503 pool-exhausted when err is the timeout of a wait for a
        connection of the pool (the receiver's own, or a psycopg_pool pool's
        PoolTimeout) while every connection of it was in use, else None."""
        if isinstance(err, _PoolTimeout):
            if not err.exhausted:
                return None
            size, waited, knob = err.size, err.timeout, "the receiver's pool_size"
        else:
            pp = sys.modules.get("psycopg_pool")  # imported by whoever made a psycopg_pool pool
            if pp is None or not isinstance(err, getattr(pp, "PoolTimeout", ())):
                return None
            try:
                stats = self._pool.get_stats()
                size, waited = int(stats["pool_max"]), float(self._pool.timeout)
                if stats["pool_size"] < size or stats["pool_available"] > 0:
                    return None
            except Exception:  # noqa: BLE001 - not a pool whose use can be told
                return None
            knob = "the pool's max_size"
        return _Problem(503, "pool-exhausted", "No database connection free",
                        f"timed out after {waited:g} s waiting for a connection of the receiver's pool: all {size} were "
                        f"in use (with in_transaction each keyed request holds one for its whole app; raise {knob}); "
                        "the request was not processed, retry it with the same key", [("Retry-After", "1")])

    async def _refuse(self, send: Send, key: str, outcome: str, data: Any) -> None:
        """Answer a request whose claim did not give it the record."""
        if outcome == "replay":
            await self._replay(send, *data)
            return
        if outcome == "mismatch":
            p = _Problem(422 if self.mode == IETF else 409, "payload-mismatch",
                         "Idempotency key reused with a different request",
                         "this key was first used with another method, path or body; use a new key for a new request",
                         [("Idempotency-Conflict", "payload-mismatch")])
        elif outcome == "outcome_unknown":
            p = _Problem(409, "outcome-unknown", "Outcome of the request with this key unknown",
                         f"the first request with idempotency key {key} stopped before its answer was stored, and its "
                         "effect may exist; it is not run again: the key is held until the provider resolves it",
                         [("Idempotency-Conflict", "outcome-unknown")], key=key)
        else:
            p = _Problem(409, "in-flight", "Request with this key in flight",
                         "a request with this key is still being processed; retry later with the same key",
                         [("Idempotency-Conflict", "in-flight"), ("Retry-After", "1")])
        await p.send(send)

    def _keep_alive(self, rscope: str, key: str, token: Any) -> "_KeepAlive":
        return _KeepAlive(self, rscope, key, token)

    async def _run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, body: bytes,
                   rscope: str, key: str, token: Any) -> None:
        cap = _Capture()
        alive = self._keep_alive(rscope, key, token)
        try:
            await app(scope, _replay_receive(body, receive), cap.send)
        except BaseException:
            await self._release(rscope, key, await alive.stop())
            raise
        token = await alive.stop()
        if cap.status is None:  # the app sent no answer: nothing to store
            await self._release(rscope, key, token)
            return
        if cap.status >= 500 and not self.store_server_errors:
            await self._release(rscope, key, token)
        else:
            try:
                async with self._pool.connection() as conn:
                    await self._complete(conn, rscope, key, token, cap.status, cap.stored_headers(self.store_headers),
                                         cap.body())
            except (psycopg.Error, OSError):
                pass  # the answer still goes out; after the recovery timeout a retry finds the record abandoned
        await cap.flush(send)

    async def _serve_in_transaction(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, body: bytes,
                                    rscope: str, key: str, fp: bytes) -> None:
        """Claim the record and run app in one transaction that also
        completes the record (in_transaction): a crash, an exception or a 5xx
        rolls back the record with the app's effect."""
        cap = _Capture()
        app_error: Optional[BaseException] = None
        outcome, data, abandoned = "in_flight", None, False
        stored = False
        try:
            async with self._pool.connection() as conn:
                try:
                    async with conn.transaction() as tx:
                        if self._idle_sql is not None:
                            await conn.execute(self._idle_sql)
                        outcome, data, abandoned = await self._claim_in(conn, rscope, key, fp)
                        if outcome != "claimed":
                            if not abandoned:
                                raise psycopg.Rollback(tx)  # nothing to keep; a mark commits
                        else:
                            if abandoned:
                                self._report_abandoned(rscope, key, True)
                            child = dict(scope)
                            child[CONNECTION_SCOPE_KEY] = conn
                            try:
                                await app(child, _replay_receive(body, receive), cap.send)
                            except BaseException as e:  # rolled back, re-raised below
                                app_error = e
                                raise psycopg.Rollback(tx) from None
                            if cap.status is None or (cap.status >= 500 and not self.store_server_errors):
                                raise psycopg.Rollback(tx)
                            if not await self._complete(conn, rscope, key, data, cap.status,
                                                        cap.stored_headers(self.store_headers), cap.body()):
                                raise psycopg.OperationalError("the in-flight record is no longer this request's")
                            stored = True
                except pg_errors.LockNotAvailable:
                    outcome, data, abandoned = "in_flight", None, False
        except (psycopg.Error, OSError) as e:
            if app_error is None:
                await self._store_failure(e, True, "the idempotency store failed while processing; nothing was "
                                          "committed, retry with the same key").send(send)
                return
        if app_error is not None:
            raise app_error
        if outcome != "claimed":
            if abandoned:
                self._report_abandoned(rscope, key, False)
            await self._refuse(send, key, outcome, data)
            return
        if stored or cap.status is not None:
            await cap.flush(send)

    async def _replay(self, send: Send, status: int, headers: Dict[str, List[str]], body: bytes) -> None:
        if self.mode == SEED and status == 201:
            status = 200
        out: List[Tuple[bytes, bytes]] = []
        for name, values in headers.items():
            for v in values:
                out.append((name.lower().encode("latin-1"), v.encode("latin-1")))
        out += [(b"idempotency-replay", b"true"), (b"idempotent-replayed", b"true"),
                (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": body})


class _KeepAlive:
    """Moves a claimed record's recovery deadline forward every third of the
    recovery timeout while the app runs, so a slow app is not taken over by
    a retry (a dead process stops extending it). stop() returns the token."""

    def __init__(self, r: "Receiver", rscope: str, key: str, token: Any):
        self.r, self.rscope, self.key, self.token = r, rscope, key, token
        self.lock = asyncio.Lock()
        self.stopped = False
        self.task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        interval = self.r.recovery_us / 3 / 1_000_000
        while True:
            await asyncio.sleep(interval)
            # Under the lock: stop() never cancels an extension in flight,
            # whose new token would then be lost. Each extension waits at
            # most a third of the recovery timeout (5 s at most) for the
            # database: one on a connection that died without a word is
            # given up, so it cannot hold stop() and the answer (an
            # extension given up may have committed a token this does not
            # hold; the answer then goes out unstored, as after a takeover).
            async with self.lock:
                if self.stopped:
                    return
                try:
                    row = await self._extend(min(interval, 5.0))
                except (psycopg.Error, OSError, asyncio.TimeoutError):
                    continue  # try again at the next beat
                if row is None:
                    return  # taken over or gone
                self.token = row[0]

    async def _extend(self, bound: float) -> Any:
        async with self.r._pool.connection() as conn:
            try:
                cur = await asyncio.wait_for(conn.execute(
                    sql.SQL("UPDATE {} SET locked_until = now() + %s::bigint * interval '1 microsecond' "
                            "WHERE scope = %s AND key = %s AND state = 'in_flight' AND locked_until = %s "
                            "RETURNING locked_until").format(self.r._table),
                    [self.r.recovery_us, self.rscope, self.key, self.token],
                ), bound)
                return await asyncio.wait_for(cur.fetchone(), bound)
            except asyncio.TimeoutError:
                # Given up: the server is asked to end the statement too
                # (within the same bound), and the pool drops the
                # connection, whose statement is still under way.
                try:
                    await asyncio.wait_for(asyncio.to_thread(conn.cancel), bound)
                except Exception:  # noqa: BLE001 - the connection is dropped anyway
                    pass
                raise

    async def stop(self) -> Any:
        async with self.lock:
            self.stopped = True
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        return self.token


def _quote_path(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/:@!$&'()*+,;=-._~")


def _replay_receive(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def inner() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # waits for http.disconnect

    return inner


class _Capture:
    """Buffers the app's answer so it can be stored before it is sent."""

    def __init__(self) -> None:
        self.status: Optional[int] = None
        self.headers: List[Tuple[bytes, bytes]] = []
        self.chunks: List[bytes] = []
        self.trailers = False

    async def send(self, msg: Message) -> None:
        t = msg.get("type")
        if t == "http.response.start":
            self.status = int(msg["status"])
            self.headers = [(bytes(k).lower(), bytes(v)) for k, v in msg.get("headers", [])]
            self.trailers = bool(msg.get("trailers", False))
        elif t == "http.response.body":
            self.chunks.append(bytes(msg.get("body", b"")))

    def body(self) -> bytes:
        return b"".join(self.chunks)

    def stored_headers(self, keep: Any) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for k, v in self.headers:
            if k in keep:
                out.setdefault(_canonical_header(k.decode("latin-1")), []).append(v.decode("latin-1"))
        return out

    async def flush(self, send: Send) -> None:
        """Send the buffered answer, marked as no replay. A server whose
        client is gone may raise OSError (ASGI): the answer is stored, and
        there is no one to send it to."""
        body = self.body()
        headers = [(k, v) for k, v in self.headers if k not in (b"content-length", b"idempotency-replay")]
        headers += [(b"idempotency-replay", b"false"), (b"content-length", str(len(body)).encode())]
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        except OSError:
            pass


def _canonical_header(name: str) -> str:
    """Header names stored as Go's http.CanonicalHeaderKey writes them."""
    return "-".join(p[:1].upper() + p[1:].lower() for p in name.split("-"))
