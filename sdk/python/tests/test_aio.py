"""drainer_client.aio: the sync API on a psycopg AsyncConnection, same answers, same exceptions.

The unit tests need nothing; the database tests need DRAINER_TEST_DATABASE_URL
(and DRAINER_TEST_SCHEMA when not drainer); the end-to-end test also needs
DRAINER_TEST_DAEMON=1 (see support.py).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import unittest
from unittest import mock

import psycopg
from psycopg import errors, pq

import support
from support import SCHEMA, unique

import drainer_client as dc
import drainer_client.aio as dca
from test_validation import GOOD, Untouchable

# A tool no drainer run of the tests routes: its rows stay pending.
UNROUTED = "py_unrouted"
IDLE = pq.TransactionStatus.IDLE
INTRANS = pq.TransactionStatus.INTRANS


class AsyncUntouchable(Untouchable):
    pass


class SameAPITest(unittest.TestCase):
    def test_same_names_and_arguments(self):
        for name in ("enqueue", "result", "wait"):
            with self.subTest(name=name):
                sync, aio = getattr(dc, name), getattr(dca, name)
                self.assertTrue(inspect.iscoroutinefunction(aio), f"drainer_client.aio.{name} is not async")
                self.assertEqual(
                    list(inspect.signature(sync).parameters.items()).__repr__(),
                    list(inspect.signature(aio).parameters.items()).__repr__(),
                )
        # The same exception classes and values, not copies.
        for name in ("DrainerError", "InvalidTuple", "PayloadError", "PayloadTooLarge", "WaitTimeout",
                     "ConnectionClosed", "UsageError", "Enqueued", "Outcome", "JSONString", "idempotency_key",
                     "TERMINAL_STATUSES", "PARKED_STATUSES", "DEFAULT_SCHEMA", "agent_step", "current_step"):
            with self.subTest(name=name):
                self.assertIs(getattr(dca, name), getattr(dc, name))

    def test_shared_statements(self):
        # One module builds the SQL for both: the sync and async enqueue send
        # the same text and parameters.
        sent = {}

        def fake(kind):
            def fetchone(conn, stmt):
                sent[kind] = stmt
                return (dc.idempotency_key(*GOOD), True)

            return fetchone

        async def afake(conn, stmt):
            return fake("aio")(conn, stmt)

        class SyncConn(psycopg.Connection):  # type: ignore[misc]
            def __init__(self):
                pass

            closed = broken = autocommit = False
            info = mock.Mock(transaction_status=INTRANS)

        class AsyncConn(psycopg.AsyncConnection):  # type: ignore[misc]
            def __init__(self):
                pass

            closed = broken = autocommit = False
            info = mock.Mock(transaction_status=INTRANS)

        with mock.patch.object(dc._client, "_fetchone", fake("sync")), mock.patch.object(dca, "_fetchone", afake):
            a = dc.enqueue(SyncConn(), *GOOD, {"b": 1, "a": [1.5, None]}, schema="py_x", traceparent="tp")
            b = asyncio.run(dca.enqueue(AsyncConn(), *GOOD, {"a": [1.5, None], "b": 1}, schema="py_x", traceparent="tp"))
        self.assertEqual(a, b)
        self.assertEqual(a, (dc.idempotency_key(*GOOD), True))
        self.assertEqual(sent["sync"], sent["aio"])
        self.assertIn('"py_x".enqueue(', sent["sync"].text)
        self.assertEqual(sent["sync"].params["payload"], '{"a":[1.5,null],"b":1}')


class AsyncValidationTest(unittest.IsolatedAsyncioTestCase):
    """The same refusals as the sync API, raised before the connection is used."""

    async def test_tuple_payload_schema(self):
        with self.assertRaises(dc.InvalidTuple) as cm:
            await dca.enqueue(AsyncUntouchable(), "", "s", "t", "", {})
        self.assertEqual(cm.exception.field, "agent_run_id")
        with self.assertRaises(dc.PayloadError) as cm:
            await dca.enqueue(AsyncUntouchable(), *GOOD, json.dumps({"a": 1}))
        self.assertIn("json.dumps(obj)", str(cm.exception))
        with self.assertRaises(dc.PayloadError) as cm:
            await dca.enqueue(AsyncUntouchable(), *GOOD, {"at": __import__("datetime").datetime(2026, 1, 1)})
        self.assertIn("naive", str(cm.exception))
        with self.assertRaises(dc.PayloadTooLarge):
            await dca.enqueue(AsyncUntouchable(), *GOOD, {"a": "x" * 100}, max_payload_bytes=50)
        for bad in ("", "Drainer", None):
            with self.assertRaises(dc.UsageError):
                await dca.enqueue(AsyncUntouchable(), *GOOD, {}, schema=bad)
            with self.assertRaises(dc.UsageError):
                await dca.result(AsyncUntouchable(), "idem_v1_x", schema=bad)
            with self.assertRaises(dc.UsageError):
                await dca.wait(AsyncUntouchable(), "idem_v1_x", 1, schema=bad)
        with self.assertRaises(dc.UsageError):
            await dca.enqueue(AsyncUntouchable(), *GOOD, {}, traceparent="tp\n")
        with self.assertRaises(dc.UsageError):
            await dca.enqueue(AsyncUntouchable(), *GOOD, {}, max_payload_bytes=0)

    async def test_wait_arguments(self):
        for kwargs in ({"timeout": -1}, {"timeout": float("nan")}, {"timeout": float("inf")},
                       {"timeout": 1, "min_poll": 0}, {"timeout": 1, "min_poll": 2, "max_poll": 1}):
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(dc.UsageError):
                    await dca.wait(AsyncUntouchable(), "idem_v1_x", **kwargs)
        for bad_key in ("", None, 5):
            with self.assertRaises(dc.UsageError):
                await dca.result(AsyncUntouchable(), bad_key)
            with self.assertRaises(dc.UsageError):
                await dca.wait(AsyncUntouchable(), bad_key, 1)

    async def test_not_an_async_connection(self):
        with self.assertRaises(dc.UsageError) as cm:
            await dca.enqueue(object(), *GOOD, {})
        self.assertIn("psycopg.AsyncConnection", str(cm.exception))

    async def test_decorator(self):
        @dca.outbox_tool(UNROUTED)
        async def tool(n: int) -> None:
            raise AssertionError("the body ran")

        self.assertIsInstance(tool, dca.AsyncOutboxTool)
        with self.assertRaises(dc.UsageError):
            await tool(1)
        with self.assertRaises(dc.InvalidTuple):
            dca.outbox_tool("")
        # The sync decorator still refuses coroutine functions, pointing here.
        with self.assertRaises(TypeError) as cm:
            dc.outbox_tool(UNROUTED)(tool.__wrapped__)
        self.assertIn("drainer_client.aio.outbox_tool", str(cm.exception))


class AsyncDatabaseTest(support.OwnTable, support.AsyncDatabaseTestCase):
    def setUp(self):
        self.make_own_table()

    async def own_write(self, conn, id_: str) -> None:
        await conn.execute(self.own_insert, [id_, "charging"])

    async def test_commits_with_the_agents_own_write(self):
        run = unique("run")
        payload = {"invoice_id": "inv_1", "amount_cents": 500, "note": "é/\u2028"}
        async with self.aconn.transaction():
            await self.own_write(self.aconn, "inv_1")
            key, created = await dca.enqueue(self.aconn, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA)
            self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (0, 0))
        self.assertTrue(created)
        self.assertEqual(key, dc.idempotency_key(run, "charge", UNROUTED, "invoice:inv_1"))
        self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (1, 1))
        self.assertEqual(json.loads(self.outbox_payload(key)), payload)
        out = await dca.result(self.aconn, key, schema=SCHEMA)
        self.assertIsInstance(out, dc.Outcome)
        self.assertIn(out.status, ("pending", "in_flight"))
        self.assertIsNone(out.response)
        # The sync API reads the same row and sees the same intent.
        with self.conn_sync() as c:
            with c.transaction():
                self.assertEqual(dc.enqueue(c, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA), (key, False))

    def conn_sync(self):
        return psycopg.connect(support.DATABASE_URL)

    async def test_never_commits_itself_and_rolls_back(self):
        run = unique("run")
        await self.own_write(self.aconn, "inv_2")
        key, created = await dca.enqueue(self.aconn, run, "charge", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        self.assertTrue(created)
        self.assertEqual(self.aconn.info.transaction_status, INTRANS)
        await self.aconn.rollback()
        self.assertEqual((self.own_rows("inv_2"), self.outbox_rows(key)), (0, 0))
        with self.assertRaises(RuntimeError):
            async with self.aconn.transaction():
                await self.own_write(self.aconn, "inv_3")
                key, _ = await dca.enqueue(self.aconn, run, "charge", UNROUTED, "invoice:inv_3", {"n": 1}, schema=SCHEMA)
                raise RuntimeError("the agent failed after enqueueing")
        self.assertEqual((self.own_rows("inv_3"), self.outbox_rows(key)), (0, 0))
        self.assertIsNone(await dca.result(self.aconn, key, schema=SCHEMA))

    async def test_different_payload_raises_unique_violation(self):
        run = unique("run")
        async with self.aconn.transaction():
            key, _ = await dca.enqueue(self.aconn, run, "charge", UNROUTED, "s", {"amount_cents": 500}, schema=SCHEMA)
        with self.assertRaises(errors.UniqueViolation) as cm:
            async with self.aconn.transaction():
                await self.own_write(self.aconn, "inv_4")
                await dca.enqueue(self.aconn, run, "charge", UNROUTED, "s", {"amount_cents": 900}, schema=SCHEMA)
        self.assertEqual(cm.exception.sqlstate, "23505")
        self.assertIn(key, str(cm.exception))
        self.assertEqual(self.own_rows("inv_4"), 0)

    async def test_autocommit_outside_a_transaction_is_refused(self):
        conn = await self.aconnect(autocommit=True)
        run = unique("run")
        with self.assertRaises(dc.UsageError) as cm:
            await dca.enqueue(conn, run, "charge", UNROUTED, "", {}, schema=SCHEMA)
        self.assertIn("conn.transaction()", str(cm.exception))
        self.assertEqual(self.outbox_rows(dc.idempotency_key(run, "charge", UNROUTED, "")), 0)
        async with conn.transaction():
            key, created = await dca.enqueue(conn, run, "charge", UNROUTED, "", {}, schema=SCHEMA)
        self.assertEqual((created, self.outbox_rows(key)), (True, 1))

    async def test_refusals_keep_the_transaction_usable(self):
        run = unique("run")
        async with self.aconn.transaction():
            await self.own_write(self.aconn, "inv_5")
            with self.assertRaises(dc.InvalidTuple):
                await dca.enqueue(self.aconn, run, "", UNROUTED, "", {}, schema=SCHEMA)
            with self.assertRaises(dc.PayloadError):
                await dca.enqueue(self.aconn, run, "s", UNROUTED, "", json.dumps({"a": 1}), schema=SCHEMA)
            with self.assertRaises(dc.PayloadTooLarge):
                await dca.enqueue(self.aconn, run, "s", UNROUTED, "", {"b": "x" * dc.DEFAULT_MAX_PAYLOAD_BYTES}, schema=SCHEMA)
            self.assertEqual(self.aconn.info.transaction_status, INTRANS)
            key, _ = await dca.enqueue(self.aconn, run, "s", UNROUTED, "", dc.JSONString('{"a": 1}'), schema=SCHEMA)
        self.assertEqual((self.own_rows("inv_5"), self.outbox_rows(key)), (1, 1))
        self.assertEqual(json.loads(self.outbox_payload(key)), '{"a": 1}')

    async def test_dates_stored_as_javascript_writes_them(self):
        import datetime

        run = unique("run")
        when = datetime.datetime(2026, 1, 2, 4, 4, 5, 6789, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
        async with self.aconn.transaction():
            key, _ = await dca.enqueue(
                self.aconn, run, "s", UNROUTED, "", {"at": when, "day": datetime.date(2026, 1, 2)}, schema=SCHEMA
            )
        self.assertEqual(json.loads(self.outbox_payload(key)), {"at": "2026-01-02T03:04:05.006Z", "day": "2026-01-02"})
        # The same instant written in another zone is the same payload.
        async with self.aconn.transaction():
            again = await dca.enqueue(
                self.aconn, run, "s", UNROUTED, "",
                {"day": datetime.date(2026, 1, 2), "at": when.astimezone(datetime.timezone.utc)}, schema=SCHEMA,
            )
        self.assertEqual(again, (key, False))

    async def test_traceparent(self):
        run = unique("run")
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        async with self.aconn.transaction():
            key, _ = await dca.enqueue(self.aconn, run, "s", UNROUTED, "", {}, schema=SCHEMA, traceparent=tp)
        got = self.count(f'SELECT count(*) FROM "{SCHEMA}".outbox WHERE key = %s AND traceparent = %s', key, tp)
        self.assertEqual(got, 1)

    async def test_wait_times_out_with_the_last_status(self):
        run = unique("run")
        async with self.aconn.transaction():
            key, _ = await dca.enqueue(self.aconn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        with self.assertRaises(dc.WaitTimeout) as cm:
            await dca.wait(self.aconn, key, 0.3, schema=SCHEMA, min_poll=0.01, max_poll=0.05)
        err = cm.exception
        self.assertIsInstance(err, TimeoutError)
        self.assertEqual((err.key, err.timeout), (key, 0.3))
        self.assertIn(err.last_status, ("pending", "in_flight"))
        self.assertEqual(self.aconn.info.transaction_status, IDLE)
        with self.assertRaises(dc.WaitTimeout) as cm:
            await dca.wait(self.aconn, "idem_v1_" + "0" * 32, 0, schema=SCHEMA)
        self.assertIsNone(cm.exception.last_status)

    async def test_wait_backs_off_and_leaves_the_loop_free(self):
        # What it promises whatever the machine's speed: the delays between
        # reads follow the back-off (only the last one cut short by the
        # deadline), it awaits asyncio.sleep between reads so other tasks
        # run meanwhile, and a read begins at or after the deadline.
        run = unique("run")
        async with self.aconn.transaction():
            key, _ = await dca.enqueue(self.aconn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        reads = []
        real = dca._fetchone

        async def counting(conn, stmt):
            reads.append(time.monotonic())
            return await real(conn, stmt)

        real_sleep = asyncio.sleep
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await real_sleep(0.01)
                ticks += 1

        sleeps = []  # (asked, when asked, ticks while it slept)

        async def recording(delay, *args, **kwargs):
            before, at = ticks, time.monotonic()
            await real_sleep(delay, *args, **kwargs)
            sleeps.append((delay, at, ticks - before))

        t = asyncio.create_task(ticker())
        start = time.monotonic()
        try:
            with mock.patch.object(dca, "_fetchone", counting), mock.patch.object(dca.asyncio, "sleep", recording), \
                    self.assertRaises(dc.WaitTimeout):
                await dca.wait(self.aconn, key, 1.2, schema=SCHEMA, min_poll=0.05, max_poll=0.4)
        finally:
            t.cancel()
        self.assertGreaterEqual(time.monotonic() - start, 1.2)
        self.assertGreaterEqual(reads[-1], start + 1.2, [r - start for r in reads])
        # One sleep between reads, each the back-off's next delay (0.05,
        # 0.1, 0.2, 0.4, 0.4, …) unless cut to end at the deadline: a
        # handful of reads, not a busy loop.
        self.assertEqual(len(sleeps), len(reads) - 1, (sleeps, reads))
        self.assertLessEqual(len(reads), 9, reads)
        schedule = [0.05, 0.1, 0.2] + [0.4] * 20
        for i, (asked, at, _) in enumerate(sleeps):
            cut = at + asked >= start + 1.2
            self.assertTrue(abs(asked - schedule[i]) < 1e-9 or (cut and asked <= schedule[i]),
                            (i, [(a, round(w - start, 3)) for a, w, _ in sleeps]))
        # Other tasks ran while it waited: the ticker's timer (every
        # 0.01 s) comes due before the end of any sleep of 0.05 s or more.
        slept = [n for asked, _, n in sleeps if asked >= 0.05]
        self.assertTrue(all(n >= 1 for n in slept), sleeps)

    async def test_wait_inside_a_transaction_is_refused(self):
        run = unique("run")
        key, _ = await dca.enqueue(self.aconn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
        with self.assertRaises(dc.UsageError) as cm:
            await dca.wait(self.aconn, key, 1, schema=SCHEMA)
        self.assertIn("commit", str(cm.exception))
        await self.aconn.rollback()

    async def test_wait_returns_a_settled_row(self):
        run = unique("run")
        self.abort_run(run)
        conn = await self.aconnect(autocommit=True)
        async with conn.transaction():
            key, created = await dca.enqueue(conn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        self.assertTrue(created)
        status, response, last_error = await dca.wait(conn, key, 30, schema=SCHEMA)
        self.assertEqual((status, response), ("cancelled", None))
        self.assertIn("aborted", last_error)
        # On a non-autocommit connection too, which is left idle.
        self.assertEqual((await dca.wait(self.aconn, key, 30, schema=SCHEMA)).status, "cancelled")
        self.assertEqual(self.aconn.info.transaction_status, IDLE)
        # The sync wait answers the same.
        with self.conn_sync() as c:
            self.assertEqual(dc.wait(c, key, 30, schema=SCHEMA), (status, response, last_error))

    async def test_wrong_kind_of_connection(self):
        with psycopg.connect(support.DATABASE_URL) as sync_conn:
            with self.assertRaises(dc.UsageError) as cm:
                await dca.enqueue(sync_conn, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
            self.assertIn("drainer_client.enqueue", str(cm.exception))
        with self.assertRaises(dc.UsageError) as cm:
            dc.enqueue(self.aconn, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA)
        self.assertIn("drainer_client.aio.enqueue", str(cm.exception))

    async def test_closed_connection(self):
        conn = await self.aconnect()
        await conn.close()
        for call in (
            lambda: dca.enqueue(conn, unique("run"), "s", UNROUTED, "", {}, schema=SCHEMA),
            lambda: dca.result(conn, "idem_v1_00", schema=SCHEMA),
            lambda: dca.wait(conn, "idem_v1_00", 5, schema=SCHEMA),
        ):
            with self.assertRaises(dc.ConnectionClosed) as cm:
                await call()
            self.assertIsInstance(cm.exception, psycopg.OperationalError)
            self.assertIn("closed", str(cm.exception))

    async def test_broken_by_the_server(self):
        conn = await self.aconnect()
        pid = conn.info.backend_pid
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            for _ in range(600):
                if admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0] == 0:
                    break
                admin.execute("SELECT pg_sleep(0.05)")
        run = unique("run")
        with self.assertRaises(dc.ConnectionClosed) as cm:
            await dca.enqueue(conn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
        self.assertIsInstance(cm.exception.__cause__, psycopg.OperationalError)

    async def test_decorated_tool(self):
        ran = []

        @dca.outbox_tool(UNROUTED, scope=lambda invoice_id, **_: f"invoice:{invoice_id}")
        async def charge(invoice_id: str, amount_cents: int, currency: str = "eur") -> None:
            ran.append(invoice_id)

        run = unique("run")
        async with self.aconn.transaction():
            with dca.agent_step(self.aconn, run, "charge", schema=SCHEMA):
                await self.own_write(self.aconn, "inv_7")
                key = await charge("inv_7", amount_cents=500)
        self.assertEqual(ran, [])
        self.assertEqual(key, dc.idempotency_key(run, "charge", UNROUTED, "invoice:inv_7"))
        self.assertEqual((self.own_rows("inv_7"), self.outbox_rows(key)), (1, 1))
        self.assertEqual(json.loads(self.outbox_payload(key)), {"invoice_id": "inv_7", "amount_cents": 500, "currency": "eur"})
        async with self.aconn.transaction():
            with dca.agent_step(self.aconn, run, "charge", schema=SCHEMA):
                self.assertEqual(await charge.enqueue(invoice_id="inv_7", amount_cents=500), (key, False))


class AsyncEndToEndTest(support.AsyncDatabaseTestCase):
    needs_daemon = True

    async def test_enqueue_and_wait_for_the_outcome(self):
        run = unique("run")
        payload = {"invoice_id": "inv_1", "amount_cents": 500}
        async with self.aconn.transaction():
            key, created = await dca.enqueue(self.aconn, run, "charge", "py_charge_card", "invoice:inv_1", payload, schema=SCHEMA)
        self.assertTrue(created)
        status, response, last_error = await dca.wait(self.aconn, key, 120, schema=SCHEMA)
        self.assertEqual(status, "succeeded", last_error)
        self.assertEqual(response["received"], payload)
        self.assertEqual(await dca.result(self.aconn, key, schema=SCHEMA), (status, response, last_error))

    async def test_terminal_failure(self):
        async with self.aconn.transaction():
            key, _ = await dca.enqueue(self.aconn, unique("run"), "refuse", "py_refused", "", {"n": 1}, schema=SCHEMA)
        status, response, last_error = await dca.wait(self.aconn, key, 120, schema=SCHEMA)
        self.assertEqual((status, response), ("failed", None))
        self.assertIn("422", last_error)


if __name__ == "__main__":
    unittest.main()
