"""enqueue through SQLAlchemy (1.4 and later): the intent commits, or rolls back, with the caller's session.

Sync: Session and Connection on the psycopg2 driver; async: AsyncSession and
AsyncConnection on asyncpg. SQLAlchemy, psycopg2, asyncpg and greenlet are
Debian packages installed by `make python-deps`; without them this module
fails to import, which fails the run. The database tests need
DRAINER_TEST_DATABASE_URL; the end-to-end test DRAINER_TEST_DAEMON=1 too.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import unittest

import sqlalchemy
import sqlalchemy.exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import support
from support import SCHEMA, unique

import drainer_client as dc
import drainer_client.aio as dca

UNROUTED = "py_unrouted"


class OptionalTest(unittest.TestCase):
    def test_sqlalchemy_is_optional(self):
        # Importing the library never imports SQLAlchemy, and it works where
        # SQLAlchemy cannot be imported at all.
        code = (
            "import sys; sys.modules['sqlalchemy'] = None\n"
            "import drainer_client as dc, drainer_client.aio as dca\n"
            "try:\n"
            "    dc.enqueue(object(), 'r', 's', 't', '', {})\n"
            "except dc.UsageError as e:\n"
            "    print('refused:', e)\n"
        )
        env = dict(os.environ, PYTHONPATH=str(support.SDK_DIR / "src"))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("refused: enqueue: conn must be a psycopg.Connection", out.stdout)
        code = "import sys, drainer_client, drainer_client.aio; print('sqlalchemy' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "False"), out.stderr)

    def test_version(self):
        # Debian 12 ships 1.4; the library is written for 1.4 and 2.x.
        self.assertGreaterEqual(tuple(int(p) for p in sqlalchemy.__version__.split(".")[:2]), (1, 4))


class SyncSQLAlchemyTest(support.OwnTable, support.DatabaseTestCase):
    def setUp(self):
        self.make_own_table()
        super().setUp()
        self.engine = support.sqlalchemy_engine(future=True)
        self.addCleanup(self.engine.dispose)

    def own_write(self, session_or_conn, id_):
        session_or_conn.execute(text(self.own_insert_named), {"id": id_, "state": "charging"})

    def test_session_commits_with_the_callers_write(self):
        run = unique("run")
        payload = {"invoice_id": "inv_1", "amount_cents": 500, "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)}
        with Session(self.engine) as session:
            with session.begin():
                self.own_write(session, "inv_1")
                key, created = dc.enqueue(session, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA)
                self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (0, 0))
            self.assertTrue(created)
            self.assertEqual(key, dc.idempotency_key(run, "charge", UNROUTED, "invoice:inv_1"))
            self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (1, 1))
            stored = json.loads(self.outbox_payload(key))
            self.assertEqual(stored, {"invoice_id": "inv_1", "amount_cents": 500, "at": "2026-01-02T03:04:05.000Z"})
            out = dc.result(session, key, schema=SCHEMA)
            self.assertIsInstance(out, dc.Outcome)
            self.assertIn(out.status, ("pending", "in_flight"))
            session.rollback()
        # The psycopg API sees the same intent: same key, same payload.
        with self.conn.transaction():
            self.assertEqual(dc.enqueue(self.conn, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA), (key, False))

    def test_session_autobegin_and_commit(self):
        run = unique("run")
        with Session(self.engine) as session:
            key, created = dc.enqueue(session, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
            self.own_write(session, "inv_2")
            self.assertTrue(session.in_transaction())
            self.assertEqual(self.outbox_rows(key), 0)
            session.commit()
        self.assertEqual((self.own_rows("inv_2"), self.outbox_rows(key)), (1, 1))

    def test_session_rolls_back_with_the_caller(self):
        run = unique("run")
        with Session(self.engine) as session:
            with self.assertRaises(RuntimeError):
                with session.begin():
                    self.own_write(session, "inv_3")
                    key, _ = dc.enqueue(session, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
                    raise RuntimeError("the agent failed")
        self.assertEqual((self.own_rows("inv_3"), self.outbox_rows(key)), (0, 0))

    def test_connection_commit_and_rollback(self):
        run = unique("run")
        with self.engine.connect() as conn:
            with conn.begin():
                self.own_write(conn, "inv_4")
                key, created = dc.enqueue(conn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
            self.assertTrue(created)
            self.assertEqual((self.own_rows("inv_4"), self.outbox_rows(key)), (1, 1))
            # Autobegun (future) connection, rolled back.
            self.own_write(conn, "inv_5")
            other, _ = dc.enqueue(conn, run, "t", UNROUTED, "", {"n": 2}, schema=SCHEMA)
            conn.rollback()
        self.assertEqual((self.own_rows("inv_5"), self.outbox_rows(other)), (0, 0))

    def test_legacy_connection_outside_begin_is_refused(self):
        engine = support.sqlalchemy_engine()  # 1.4 without future=True
        self.addCleanup(engine.dispose)
        run = unique("run")
        with engine.connect() as conn:
            # On 2.x every Connection is future (it begins by itself).
            if not isinstance(conn, sqlalchemy.future.Connection):
                with self.assertRaises(dc.UsageError) as cm:
                    dc.enqueue(conn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
                self.assertIn("conn.begin()", str(cm.exception))
            with conn.begin():
                key, created = dc.enqueue(conn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
        self.assertEqual((created, self.outbox_rows(key)), (True, 1))

    def test_autocommit_isolation_is_refused(self):
        engine = support.sqlalchemy_engine(future=True, isolation_level="AUTOCOMMIT")
        self.addCleanup(engine.dispose)
        run = unique("run")
        with Session(engine) as session:
            with self.assertRaises(dc.UsageError) as cm:
                dc.enqueue(session, run, "s", UNROUTED, "", {}, schema=SCHEMA)
            self.assertIn("AUTOCOMMIT", str(cm.exception))
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            with self.assertRaises(dc.UsageError):
                dc.enqueue(conn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
        self.assertEqual(self.outbox_rows(dc.idempotency_key(run, "s", UNROUTED, "")), 0)

    def test_different_payload(self):
        run = unique("run")
        with Session(self.engine) as session, session.begin():
            key, _ = dc.enqueue(session, run, "s", UNROUTED, "", {"amount_cents": 500}, schema=SCHEMA)
        with Session(self.engine) as session:
            with self.assertRaises(sqlalchemy.exc.IntegrityError) as cm:
                with session.begin():
                    self.own_write(session, "inv_6")
                    dc.enqueue(session, run, "s", UNROUTED, "", {"amount_cents": 900}, schema=SCHEMA)
        self.assertEqual(cm.exception.orig.pgcode, "23505")
        self.assertIn(key, str(cm.exception))
        self.assertEqual(self.own_rows("inv_6"), 0)

    def test_refusals_before_the_database(self):
        run = unique("run")
        with Session(self.engine) as session, session.begin():
            self.own_write(session, "inv_7")
            with self.assertRaises(dc.PayloadError) as cm:
                dc.enqueue(session, run, "s", UNROUTED, "", json.dumps({"a": 1}), schema=SCHEMA)
            self.assertIn("json.dumps(obj)", str(cm.exception))
            with self.assertRaises(dc.InvalidTuple):
                dc.enqueue(session, run, "", UNROUTED, "", {}, schema=SCHEMA)
            with self.assertRaises(dc.UsageError):
                dc.enqueue(session, run, "s", UNROUTED, "", {}, schema="Bad")
            key, _ = dc.enqueue(session, run, "s", UNROUTED, "", dc.JSONString("hello"), schema=SCHEMA)
        self.assertEqual((self.own_rows("inv_7"), self.outbox_payload(key)), (1, '"hello"'))

    def test_engine_and_async_objects_are_refused(self):
        with self.assertRaises(dc.UsageError) as cm:
            dc.enqueue(self.engine, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
        self.assertIn("Session or a Connection", str(cm.exception))
        aengine = support.sqlalchemy_async_engine()
        try:
            with self.assertRaises(dc.UsageError) as cm:
                dc.enqueue(AsyncSession(aengine), unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
            self.assertIn("drainer_client.aio.enqueue", str(cm.exception))
        finally:
            aengine.sync_engine.dispose()

    def test_scoped_session_and_traceparent(self):
        factory = scoped_session(sessionmaker(self.engine, future=True))
        self.addCleanup(factory.remove)
        run = unique("run")
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        key, created = dc.enqueue(factory, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA, traceparent=tp)
        factory.commit()
        self.assertTrue(created)
        self.assertEqual(self.count(f'SELECT count(*) FROM "{SCHEMA}".outbox WHERE key = %s AND traceparent = %s', key, tp), 1)

    def test_wait(self):
        run = unique("run")
        self.abort_run(run)  # enqueued into an aborted run: created cancelled, settled at once
        with Session(self.engine) as session:
            with session.begin():
                key, _ = dc.enqueue(session, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
                with self.assertRaises(dc.UsageError):
                    dc.wait(session, key, 1, schema=SCHEMA)
            status, response, last_error = dc.wait(session, key, 30, schema=SCHEMA)
            self.assertEqual((status, response), ("cancelled", None))
            self.assertFalse(session.in_transaction())
        with self.engine.connect() as conn:
            self.assertEqual(dc.wait(conn, key, 30, schema=SCHEMA).status, "cancelled")
            self.assertFalse(conn.in_transaction())
            conn.execute(text("SELECT 1"))
            with self.assertRaises(dc.UsageError):
                dc.wait(conn, key, 1, schema=SCHEMA)
        # Pending: the timeout.
        with Session(self.engine) as session:
            with session.begin():
                pending, _ = dc.enqueue(session, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
            with self.assertRaises(dc.WaitTimeout) as cm:
                dc.wait(session, pending, 0.2, schema=SCHEMA, min_poll=0.01)
            self.assertIn(cm.exception.last_status, ("pending", "in_flight"))

    def test_decorated_tool_in_a_session(self):
        @dc.outbox_tool(UNROUTED)
        def tool(n: int) -> None:
            raise AssertionError("the body ran")

        run = unique("run")
        with Session(self.engine) as session:
            with session.begin(), dc.agent_step(session, run, "s", schema=SCHEMA):
                self.own_write(session, "inv_8")
                key = tool(3)
        self.assertEqual((self.own_rows("inv_8"), self.outbox_rows(key)), (1, 1))


class AsyncSQLAlchemyTest(support.OwnTable, support.AsyncDatabaseTestCase):
    def setUp(self):
        self.make_own_table()

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.engine = support.sqlalchemy_async_engine()
        self.addAsyncCleanup(self.engine.dispose)

    async def own_write(self, session_or_conn, id_):
        await session_or_conn.execute(text(self.own_insert_named), {"id": id_, "state": "charging"})

    async def test_async_session_commits_with_the_callers_write(self):
        run = unique("run")
        payload = {"invoice_id": "inv_1", "day": datetime.date(2026, 1, 2)}
        async with AsyncSession(self.engine) as session:
            async with session.begin():
                await self.own_write(session, "inv_1")
                key, created = await dca.enqueue(session, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA)
                self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (0, 0))
            self.assertTrue(created)
            self.assertEqual(key, dc.idempotency_key(run, "charge", UNROUTED, "invoice:inv_1"))
            self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (1, 1))
            self.assertEqual(json.loads(self.outbox_payload(key)), {"invoice_id": "inv_1", "day": "2026-01-02"})
            out = await dca.result(session, key, schema=SCHEMA)
            self.assertIn(out.status, ("pending", "in_flight"))
            await session.rollback()
        async with self.aconn.transaction():
            self.assertEqual(await dca.enqueue(self.aconn, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA), (key, False))

    async def test_async_session_rolls_back_with_the_caller(self):
        run = unique("run")
        async with AsyncSession(self.engine) as session:
            with self.assertRaises(RuntimeError):
                async with session.begin():
                    await self.own_write(session, "inv_2")
                    key, _ = await dca.enqueue(session, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
                    raise RuntimeError("the agent failed")
        self.assertEqual((self.own_rows("inv_2"), self.outbox_rows(key)), (0, 0))

    async def test_async_connection_commit_and_rollback(self):
        run = unique("run")
        async with self.engine.connect() as conn:
            async with conn.begin():
                await self.own_write(conn, "inv_3")
                key, created = await dca.enqueue(conn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
            self.assertEqual((created, self.own_rows("inv_3"), self.outbox_rows(key)), (True, 1, 1))
            await self.own_write(conn, "inv_4")
            other, _ = await dca.enqueue(conn, run, "t", UNROUTED, "", {"n": 2}, schema=SCHEMA)
            await conn.rollback()
        self.assertEqual((self.own_rows("inv_4"), self.outbox_rows(other)), (0, 0))

    async def test_different_payload(self):
        run = unique("run")
        async with AsyncSession(self.engine) as session:
            async with session.begin():
                key, _ = await dca.enqueue(session, run, "s", UNROUTED, "", {"amount_cents": 500}, schema=SCHEMA)
            with self.assertRaises(sqlalchemy.exc.IntegrityError) as cm:
                async with session.begin():
                    await self.own_write(session, "inv_5")
                    await dca.enqueue(session, run, "s", UNROUTED, "", {"amount_cents": 900}, schema=SCHEMA)
        self.assertEqual(cm.exception.orig.pgcode, "23505")
        self.assertIn(key, str(cm.exception))
        self.assertEqual(self.own_rows("inv_5"), 0)

    async def test_autocommit_isolation_and_sync_objects_are_refused(self):
        engine = support.sqlalchemy_async_engine(isolation_level="AUTOCOMMIT")
        self.addAsyncCleanup(engine.dispose)
        async with AsyncSession(engine) as session:
            with self.assertRaises(dc.UsageError) as cm:
                await dca.enqueue(session, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
            self.assertIn("AUTOCOMMIT", str(cm.exception))
        sync_engine = support.sqlalchemy_engine(future=True)
        self.addCleanup(sync_engine.dispose)
        with Session(sync_engine) as session:
            with self.assertRaises(dc.UsageError) as cm:
                await dca.enqueue(session, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
            self.assertIn("drainer_client.enqueue", str(cm.exception))
        with self.assertRaises(dc.UsageError):
            await dca.enqueue(self.engine, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)

    async def test_wait(self):
        run = unique("run")
        self.abort_run(run)
        async with AsyncSession(self.engine) as session:
            async with session.begin():
                key, _ = await dca.enqueue(session, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
                with self.assertRaises(dc.UsageError):
                    await dca.wait(session, key, 1, schema=SCHEMA)
            status, response, last_error = await dca.wait(session, key, 30, schema=SCHEMA)
            self.assertEqual((status, response), ("cancelled", None))
            self.assertIn("aborted", last_error)
            self.assertFalse(session.in_transaction())
        async with self.engine.connect() as conn:
            self.assertEqual((await dca.wait(conn, key, 30, schema=SCHEMA)).status, "cancelled")
            self.assertFalse(conn.in_transaction())
        async with AsyncSession(self.engine) as session:
            async with session.begin():
                pending, _ = await dca.enqueue(session, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
            with self.assertRaises(dc.WaitTimeout) as cm:
                await dca.wait(session, pending, 0.2, schema=SCHEMA, min_poll=0.01)
            self.assertIn(cm.exception.last_status, ("pending", "in_flight"))

    async def test_decorated_tool_in_an_async_session(self):
        @dca.outbox_tool(UNROUTED)
        def tool(n: int) -> None:
            raise AssertionError("the body ran")

        run = unique("run")
        async with AsyncSession(self.engine) as session:
            async with session.begin():
                with dca.agent_step(session, run, "s", schema=SCHEMA):
                    await self.own_write(session, "inv_6")
                    key = await tool(3)
        self.assertEqual((self.own_rows("inv_6"), self.outbox_rows(key)), (1, 1))


class AsyncSQLAlchemyEndToEndTest(support.AsyncDatabaseTestCase):
    needs_daemon = True

    async def test_async_session_to_outcome(self):
        engine = support.sqlalchemy_async_engine()
        self.addAsyncCleanup(engine.dispose)
        run = unique("run")
        async with AsyncSession(engine) as session:
            async with session.begin():
                key, created = await dca.enqueue(session, run, "charge", "py_charge_card", "invoice:sa", {"n": 1}, schema=SCHEMA)
            status, response, last_error = await dca.wait(session, key, 120, schema=SCHEMA)
        self.assertTrue(created)
        self.assertEqual(status, "succeeded", last_error)
        self.assertEqual(response["received"], {"n": 1})


if __name__ == "__main__":
    unittest.main()
