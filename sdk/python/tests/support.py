"""Shared helpers of the drainer_client tests.

Unit tests need nothing but the library. Database tests need
DRAINER_TEST_DATABASE_URL (a database migrated by `drainer migrate`) and
DRAINER_TEST_SCHEMA (default drainer); end-to-end tests also need
DRAINER_TEST_DAEMON=1, meaning a `drainer run` on that database routes the
tools of test_e2e.py (integration/sdk_python_test.go sets all of this up).
Without them those tests are skipped with a message saying what is missing.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import unittest
import uuid
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
SDK_DIR = HERE.parent
REPO_ROOT = SDK_DIR.parent.parent

# Run from a checkout without installing: import the library from src/.
_SRC = str(SDK_DIR / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import psycopg  # noqa: E402
import psycopg.sql  # noqa: E402

DATABASE_URL = os.environ.get("DRAINER_TEST_DATABASE_URL", "")
SCHEMA = os.environ.get("DRAINER_TEST_SCHEMA", "") or "drainer"
DAEMON = os.environ.get("DRAINER_TEST_DAEMON", "") == "1"

NO_DATABASE = "set DRAINER_TEST_DATABASE_URL to a database migrated by `drainer migrate` (and DRAINER_TEST_SCHEMA if not drainer) to run the database tests"
NO_DAEMON = "set DRAINER_TEST_DAEMON=1 with a `drainer run` routing the py_* tools (see integration/sdk_python_test.go) to run the end-to-end tests"


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


class DatabaseTestCase(unittest.TestCase):
    """A test case with a fresh non-autocommit connection per test; skipped without a database."""

    conn: "psycopg.Connection[Any]"

    @classmethod
    def setUpClass(cls) -> None:
        if not DATABASE_URL:
            raise unittest.SkipTest(NO_DATABASE)
        super().setUpClass()

    def setUp(self) -> None:
        self.conn = psycopg.connect(DATABASE_URL)
        self.addCleanup(self.conn.close)

    def connect(self, **kwargs: Any) -> "psycopg.Connection[Any]":
        """Another connection, closed when the test ends."""
        c = psycopg.connect(DATABASE_URL, **kwargs)
        self.addCleanup(c.close)
        return c

    def count(self, query: "str | psycopg.sql.Composable", *params: Any) -> int:
        """Run a count on a separate autocommit connection: what others see committed."""
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            row = c.execute(query, params).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return int(row[0])

    def outbox_rows(self, key: str) -> int:
        return self.count(f'SELECT count(*) FROM "{SCHEMA}".outbox WHERE key = %s', key)


class OwnTable:
    """Mixin: a table of "the agent's own state", created for the test and dropped after it.

    ``self.table`` is its name; write to it with :attr:`own_insert` (a
    statement with %s placeholders, for psycopg) or :attr:`own_insert_named`
    (with :id and :state, for SQLAlchemy's text()).
    """

    table: str

    def make_own_table(self) -> None:
        self.table = unique("py_agent_state")
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            c.execute(f'CREATE TABLE "{self.table}" (id text PRIMARY KEY, state text NOT NULL)')  # type: ignore[arg-type]
        self.addCleanup(self._drop_own_table)  # type: ignore[attr-defined]

    def _drop_own_table(self) -> None:
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            c.execute(f'DROP TABLE IF EXISTS "{self.table}"')  # type: ignore[arg-type]

    @property
    def own_insert(self) -> str:
        return f'INSERT INTO "{self.table}" (id, state) VALUES (%s, %s)'

    @property
    def own_insert_named(self) -> str:
        return f'INSERT INTO "{self.table}" (id, state) VALUES (:id, :state)'

    def own_rows(self, id_: str) -> int:
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            row = c.execute(f'SELECT count(*) FROM "{self.table}" WHERE id = %s', [id_]).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return int(row[0])

    def outbox_payload(self, key: str) -> Any:
        """The stored payload of key as text (jsonb's text form), or None."""
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            row = c.execute(
                psycopg.sql.SQL("SELECT payload::text FROM {}.outbox WHERE key = %s").format(psycopg.sql.Identifier(SCHEMA)),
                [key],
            ).fetchone()
            return None if row is None else row[0]

    def abort_run(self, run: str) -> None:
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            c.execute(psycopg.sql.SQL("SELECT {}.abort_run(%s, %s)").format(psycopg.sql.Identifier(SCHEMA)), [run, "test"])


def sqlalchemy_engine(**kwargs: Any) -> Any:
    """A SQLAlchemy engine (psycopg2 driver) on the test database."""
    import psycopg2
    import sqlalchemy

    return sqlalchemy.create_engine("postgresql+psycopg2://", creator=lambda: psycopg2.connect(DATABASE_URL), **kwargs)


def sqlalchemy_async_engine(**kwargs: Any) -> Any:
    """A SQLAlchemy async engine (asyncpg driver) on the test database."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine("postgresql+asyncpg://", connect_args={"dsn": DATABASE_URL}, **kwargs)


class AsyncDatabaseTestCase(unittest.IsolatedAsyncioTestCase):
    """DatabaseTestCase for asyncio: a fresh non-autocommit psycopg AsyncConnection per test."""

    aconn: "psycopg.AsyncConnection[Any]"

    @classmethod
    def setUpClass(cls) -> None:
        if not DATABASE_URL:
            raise unittest.SkipTest(NO_DATABASE)
        if getattr(cls, "needs_daemon", False) and not DAEMON:
            raise unittest.SkipTest(NO_DAEMON)
        super().setUpClass()

    async def asyncSetUp(self) -> None:
        # The tests check what others see with short blocking queries on the
        # loop's thread; the debug mode of IsolatedAsyncioTestCase would
        # report each as a slow callback.
        asyncio.get_running_loop().slow_callback_duration = 60
        self.aconn = await self.aconnect()

    async def aconnect(self, **kwargs: Any) -> "psycopg.AsyncConnection[Any]":
        """Another async connection, closed when the test ends."""
        c = await psycopg.AsyncConnection.connect(DATABASE_URL, **kwargs)
        self.addAsyncCleanup(c.close)
        return c

    count = DatabaseTestCase.count
    outbox_rows = DatabaseTestCase.outbox_rows


class DaemonTestCase(DatabaseTestCase):
    """A database test case that also needs a running `drainer run`."""

    @classmethod
    def setUpClass(cls) -> None:
        if not DATABASE_URL:
            raise unittest.SkipTest(NO_DATABASE)
        if not DAEMON:
            raise unittest.SkipTest(NO_DAEMON)
        super().setUpClass()
