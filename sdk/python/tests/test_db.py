"""enqueue, result and wait against a real database migrated by `drainer migrate`.

Needs DRAINER_TEST_DATABASE_URL (and DRAINER_TEST_SCHEMA when not drainer);
no daemon: rows of the tools used here either have no route or are only
read back while pending.
"""

from __future__ import annotations

import json
import threading
import unittest

import psycopg
from psycopg import errors, pq, sql

import support
from support import SCHEMA, unique

import drainer_client as dc
from test_key import REPO_VECTORS, load_vectors

# A tool no drainer run of the tests routes: its rows stay pending.
UNROUTED = "py_unrouted"

INTRANS = pq.TransactionStatus.INTRANS
IDLE = pq.TransactionStatus.IDLE


class OwnTableMixin(support.DatabaseTestCase):
    """Each test gets its own table for "the agent's own write"."""

    def setUp(self) -> None:
        self.table = unique("py_agent_state")
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, state text NOT NULL)").format(sql.Identifier(self.table)))
        # Cleanups run last-in first-out: the connections (opened after
        # this) are closed before the table is dropped.
        self.addCleanup(self._drop)
        super().setUp()

    def _drop(self) -> None:
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table)))

    def own_write(self, conn, id_: str, state: str = "charging") -> None:
        conn.execute(sql.SQL("INSERT INTO {} (id, state) VALUES (%s, %s)").format(sql.Identifier(self.table)), [id_, state])

    def own_rows(self, id_: str) -> int:
        return self.count(sql.SQL("SELECT count(*) FROM {} WHERE id = %s").format(sql.Identifier(self.table)), id_)

    def outbox(self, key: str):
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            return c.execute(
                sql.SQL(
                    "SELECT agent_run_id, step_id, tool_name, business_scope, kind, payload::text, status "
                    "FROM {}.outbox WHERE key = %s"
                ).format(sql.Identifier(SCHEMA)),
                [key],
            ).fetchone()


class SQLKeyTest(support.DatabaseTestCase):
    def test_sql_function_reproduces_the_vectors(self):
        for i, v in enumerate(load_vectors(REPO_VECTORS)):
            args = [v["agent_run_id"], v["step_id"], v["tool_name"], v["business_scope"]]
            with self.subTest(vector=i):
                got = self.conn.execute(
                    sql.SQL("SELECT {s}.idempotency_key(%s, %s, %s, %s), {s}.canonical_tuple(%s, %s, %s, %s)").format(
                        s=sql.Identifier(SCHEMA)
                    ),
                    args + args,
                ).fetchone()
                self.assertEqual(got, (v["key"], v["canonical"]))
                self.assertEqual(dc.idempotency_key(*args), got[0])


class EnqueueTest(OwnTableMixin):
    def test_commits_with_the_agents_own_write(self):
        run = unique("run")
        payload = {"invoice_id": "inv_1", "amount_cents": 500, "note": "é/\u2028"}
        with self.conn.transaction():
            self.own_write(self.conn, "inv_1")
            key, created = dc.enqueue(self.conn, run, "charge", UNROUTED, "invoice:inv_1", payload, schema=SCHEMA)
            # Not visible to anyone else before the commit.
            self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (0, 0))
        self.assertTrue(created)
        self.assertEqual(key, dc.idempotency_key(run, "charge", UNROUTED, "invoice:inv_1"))
        self.assertEqual((self.own_rows("inv_1"), self.outbox_rows(key)), (1, 1))
        row = self.outbox(key)
        self.assertEqual(row[:5], (run, "charge", UNROUTED, "invoice:inv_1", "forward"))
        self.assertEqual(json.loads(row[5]), payload)
        # Not dispatched (no route): pending, or in_flight while a daemon
        # of the other tests looks at it (it claims the row and hands it
        # back unrouted), at either read.
        self.assertIn(row[6], ("pending", "in_flight"))
        status, response, _ = dc.result(self.conn, key, schema=SCHEMA)
        self.assertIn(status, ("pending", "in_flight"))
        self.assertIsNone(response)

    def test_never_commits_itself(self):
        run = unique("run")
        self.own_write(self.conn, "inv_2")
        key, created = dc.enqueue(self.conn, run, "charge", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        self.assertTrue(created)
        self.assertEqual(self.conn.info.transaction_status, INTRANS)
        self.assertEqual((self.own_rows("inv_2"), self.outbox_rows(key)), (0, 0))
        self.conn.rollback()
        self.assertEqual((self.own_rows("inv_2"), self.outbox_rows(key)), (0, 0))

    def test_rollback_leaves_nothing(self):
        run = unique("run")
        with self.assertRaises(RuntimeError):
            with self.conn.transaction():
                self.own_write(self.conn, "inv_3")
                key, _ = dc.enqueue(self.conn, run, "charge", UNROUTED, "invoice:inv_3", {"n": 1}, schema=SCHEMA)
                raise RuntimeError("the agent failed after enqueueing")
        self.assertEqual((self.own_rows("inv_3"), self.outbox_rows(key)), (0, 0))
        self.assertIsNone(dc.result(self.conn, key, schema=SCHEMA))

    def test_retried_step_gets_the_same_key(self):
        run = unique("run")
        with self.conn.transaction():
            first = dc.enqueue(self.conn, run, "charge", UNROUTED, "invoice:inv_4", {"a": 1, "b": [1, 2]}, schema=SCHEMA)
        # The retry: another connection (a restarted agent), the same payload
        # built in another order.
        other = self.connect()
        with other.transaction():
            again = dc.enqueue(other, run, "charge", UNROUTED, "invoice:inv_4", {"b": [1, 2], "a": 1}, schema=SCHEMA)
        self.assertEqual(first, (first.key, True))
        self.assertEqual(again, (first.key, False))
        self.assertEqual(self.outbox_rows(first.key), 1)

    def test_different_payload_raises_unique_violation(self):
        run = unique("run")
        with self.conn.transaction():
            key, _ = dc.enqueue(self.conn, run, "charge", UNROUTED, "invoice:inv_5", {"amount_cents": 500}, schema=SCHEMA)
        with self.assertRaises(errors.UniqueViolation) as cm:
            with self.conn.transaction():
                self.own_write(self.conn, "inv_5")
                dc.enqueue(self.conn, run, "charge", UNROUTED, "invoice:inv_5", {"amount_cents": 900}, schema=SCHEMA)
        err = cm.exception
        self.assertEqual(err.sqlstate, "23505")
        self.assertIn(key, str(err))
        # The payload is not in the message (the key's hex digits may hold
        # "900" by chance: it is left out of the check).
        self.assertNotIn("900", str(err).replace(key, ""))
        # Nothing half-written: the agent's write rolled back with it, the
        # original intent is untouched.
        self.assertEqual(self.own_rows("inv_5"), 0)
        self.assertEqual(json.loads(self.outbox(key)[5]), {"amount_cents": 500})

    def test_concurrent_enqueue_of_the_same_tuple(self):
        run = unique("run")
        a, b = self.connect(), self.connect()
        a.execute("SELECT 1")  # a holds an open transaction from here on
        key, created = dc.enqueue(a, run, "charge", UNROUTED, "s", {"n": 1}, schema=SCHEMA)
        self.assertTrue(created)
        got = []
        started = threading.Event()

        def other():
            started.set()
            with b.transaction():
                got.append(dc.enqueue(b, run, "charge", UNROUTED, "s", {"n": 1}, schema=SCHEMA))

        t = threading.Thread(target=other)
        t.start()
        started.wait(30)
        a.commit()
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(got, [(key, False)])
        self.assertEqual(self.outbox_rows(key), 1)

    def test_autocommit_outside_a_transaction_is_refused(self):
        conn = self.connect(autocommit=True)
        run = unique("run")
        with self.assertRaises(dc.UsageError) as cm:
            dc.enqueue(conn, run, "charge", UNROUTED, "", {}, schema=SCHEMA)
        self.assertIn("conn.transaction()", str(cm.exception))
        self.assertEqual(self.outbox_rows(dc.idempotency_key(run, "charge", UNROUTED, "")), 0)
        with conn.transaction():
            key, created = dc.enqueue(conn, run, "charge", UNROUTED, "", {}, schema=SCHEMA)
        self.assertTrue(created)
        self.assertEqual(self.outbox_rows(key), 1)

    def test_refusals_before_the_database_keep_the_transaction_usable(self):
        run = unique("run")
        with self.conn.transaction():
            self.own_write(self.conn, "inv_6")
            with self.assertRaises(dc.InvalidTuple):
                dc.enqueue(self.conn, run, "", UNROUTED, "", {}, schema=SCHEMA)
            with self.assertRaises(dc.PayloadTooLarge):
                dc.enqueue(self.conn, run, "s", UNROUTED, "", {"blob": "x" * dc.DEFAULT_MAX_PAYLOAD_BYTES}, schema=SCHEMA)
            with self.assertRaises(dc.PayloadError):
                dc.enqueue(self.conn, run, "s", UNROUTED, "", {"t": {1}}, schema=SCHEMA)
            self.assertEqual(self.conn.info.transaction_status, INTRANS)  # not aborted
            key, created = dc.enqueue(self.conn, run, "s", UNROUTED, "", {"ok": True}, schema=SCHEMA)
        self.assertEqual((self.own_rows("inv_6"), self.outbox_rows(key)), (1, 1))

    def test_database_payload_limit(self):
        # The database's own limit (setting drainer.max_payload_bytes) applies
        # on top of the library's; its refusal is psycopg's error.
        run = unique("run")
        with self.assertRaises(errors.ProgramLimitExceeded) as cm:
            with self.conn.transaction():
                self.conn.execute("SET LOCAL drainer.max_payload_bytes = 100")
                dc.enqueue(self.conn, run, "s", UNROUTED, "", {"blob": "x" * 200}, schema=SCHEMA)
        self.assertIn("drainer.max_payload_bytes", str(cm.exception))
        self.assertEqual(self.outbox_rows(dc.idempotency_key(run, "s", UNROUTED, "")), 0)

    def test_unmigrated_schema(self):
        with self.assertRaises(psycopg.Error) as cm:
            dc.enqueue(self.conn, unique("run"), "s", UNROUTED, "", {}, schema="py_no_such_schema")
        self.assertIn(cm.exception.sqlstate, ("3F000", "42883"))
        self.conn.rollback()

    def test_traceparent(self):
        run = unique("run")
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        with self.conn.transaction():
            key, _ = dc.enqueue(self.conn, run, "s", UNROUTED, "", {}, schema=SCHEMA, traceparent=tp)
        got = self.conn.execute(
            sql.SQL("SELECT traceparent FROM {}.outbox WHERE key = %s").format(sql.Identifier(SCHEMA)), [key]
        ).fetchone()
        self.conn.rollback()
        self.assertEqual(got, (tp,))

    def test_connection_row_factory_and_loaders_do_not_matter(self):
        from psycopg.rows import dict_row

        conn = self.connect(row_factory=dict_row)
        run = unique("run")
        with conn.transaction():
            key, created = dc.enqueue(conn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        self.assertTrue(created)
        out = dc.result(conn, key, schema=SCHEMA)
        self.assertIsInstance(out, dc.Outcome)
        self.assertIn(out.status, ("pending", "in_flight"))
        self.assertIsNone(out.response)


class ClosedConnectionTest(support.DatabaseTestCase):
    def check_closed(self, conn, run):
        for call in (
            lambda: dc.enqueue(conn, run, "s", UNROUTED, "", {}, schema=SCHEMA),
            lambda: dc.result(conn, "idem_v1_00", schema=SCHEMA),
            lambda: dc.wait(conn, "idem_v1_00", 5, schema=SCHEMA),
        ):
            with self.assertRaises(dc.ConnectionClosed) as cm:
                call()
            self.assertIsInstance(cm.exception, psycopg.OperationalError)
            self.assertIsInstance(cm.exception, dc.DrainerError)
            self.assertIn("closed", str(cm.exception))

    def test_closed(self):
        conn = self.connect()
        conn.close()
        self.check_closed(conn, unique("run"))

    def test_broken_by_the_server(self):
        conn = self.connect()  # not autocommit: enqueue's statement opens the transaction
        pid = conn.info.backend_pid
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            # Terminated once it is gone from pg_stat_activity.
            for _ in range(600):
                row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
                if row[0] == 0:
                    break
                admin.execute("SELECT pg_sleep(0.05)")
        run = unique("run")
        with self.assertRaises(dc.ConnectionClosed) as cm:
            dc.enqueue(conn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
        self.assertIsInstance(cm.exception.__cause__, psycopg.OperationalError)
        self.check_closed(conn, run)
        self.assertEqual(self.outbox_rows(dc.idempotency_key(run, "s", UNROUTED, "")), 0)


class ResultAndWaitTest(OwnTableMixin):
    def enqueue_pending(self, conn=None):
        conn = conn or self.conn
        run = unique("run")
        with conn.transaction():
            key, _ = dc.enqueue(conn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        return key

    def test_result_of_an_unknown_key(self):
        self.assertIsNone(dc.result(self.conn, "idem_v1_" + "0" * 32, schema=SCHEMA))

    def test_wait_times_out_with_the_last_status(self):
        key = self.enqueue_pending()
        with self.assertRaises(dc.WaitTimeout) as cm:
            dc.wait(self.conn, key, 0.3, schema=SCHEMA, min_poll=0.01, max_poll=0.05)
        err = cm.exception
        self.assertIsInstance(err, TimeoutError)
        self.assertEqual((err.key, err.timeout), (key, 0.3))
        # Never dispatched (no route): pending, or in_flight while a daemon looks at it.
        self.assertIn(err.last_status, ("pending", "in_flight"))
        self.assertIn(f"still {err.last_status}", str(err))
        # No transaction was left open on a non-autocommit connection.
        self.assertEqual(self.conn.info.transaction_status, IDLE)

    def test_wait_backs_off(self):
        # Not a busy loop: reads at 0, .05, .15, .35, .75, 1.15 and the last
        # at 1.2 s with these settings.
        import time
        from unittest import mock

        key = self.enqueue_pending()
        reads = []
        real = dc._client._fetchone

        def counting(conn, stmt):
            reads.append(time.monotonic())
            return real(conn, stmt)

        with mock.patch.object(dc._client, "_fetchone", counting), self.assertRaises(dc.WaitTimeout):
            dc.wait(self.conn, key, 1.2, schema=SCHEMA, min_poll=0.05, max_poll=0.4)
        self.assertGreaterEqual(len(reads), 4, reads)
        self.assertLessEqual(len(reads), 9, reads)
        self.assertGreater(max(b - a for a, b in zip(reads, reads[1:])), 0.3)

    def test_wait_looks_again_after_a_read_that_overran_the_deadline(self):
        # A read that began before the deadline and ended after it is not
        # the last look: one more begins at or after the deadline.
        import time
        from unittest import mock

        key = self.enqueue_pending()
        began = []
        real = dc._client._fetchone

        def slow(conn, stmt):
            began.append(time.monotonic())
            time.sleep(0.2)
            return real(conn, stmt)

        start = time.monotonic()
        with mock.patch.object(dc._client, "_fetchone", slow), self.assertRaises(dc.WaitTimeout):
            dc.wait(self.conn, key, 0.1, schema=SCHEMA, min_poll=0.01, max_poll=0.05)
        self.assertGreaterEqual(len(began), 2, began)
        self.assertGreaterEqual(began[-1], start + 0.1, [b - start for b in began])

    def test_wait_for_an_unknown_key(self):
        with self.assertRaises(dc.WaitTimeout) as cm:
            dc.wait(self.conn, "idem_v1_" + "0" * 32, 0, schema=SCHEMA)
        self.assertIsNone(cm.exception.last_status)
        self.assertIn("not committed yet", str(cm.exception))

    def test_wait_inside_a_transaction_is_refused(self):
        run = unique("run")
        key, _ = dc.enqueue(self.conn, run, "s", UNROUTED, "", {}, schema=SCHEMA)
        with self.assertRaises(dc.UsageError) as cm:
            dc.wait(self.conn, key, 1, schema=SCHEMA)
        self.assertIn("commit", str(cm.exception))
        self.conn.rollback()

    def test_wait_returns_a_settled_row_at_once(self):
        # An intent enqueued into a run the agent aborted is created
        # cancelled (docs/reference.md §2): settled without any daemon.
        run = unique("run")
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as admin:
            admin.execute(sql.SQL("SELECT {}.abort_run(%s, %s)").format(sql.Identifier(SCHEMA)), [run, "test"])
        conn = self.connect(autocommit=True)
        with conn.transaction():
            key, created = dc.enqueue(conn, run, "s", UNROUTED, "", {"n": 1}, schema=SCHEMA)
        self.assertTrue(created)
        status, response, last_error = dc.wait(conn, key, 30, schema=SCHEMA)
        self.assertEqual((status, response), ("cancelled", None))
        self.assertIn("aborted", last_error)


class DecoratorTest(OwnTableMixin):
    def test_enqueues_in_the_callers_transaction_instead_of_running(self):
        ran = []

        @dc.outbox_tool(UNROUTED, scope=lambda invoice_id, **_: f"invoice:{invoice_id}")
        def charge(invoice_id: str, amount_cents: int, currency: str = "eur") -> None:
            ran.append(invoice_id)

        run = unique("run")
        with self.conn.transaction(), dc.agent_step(self.conn, run, "charge", schema=SCHEMA):
            self.own_write(self.conn, "inv_7")
            key = charge("inv_7", amount_cents=500)
            self.assertEqual(self.outbox_rows(key), 0)
        self.assertEqual(ran, [])
        self.assertEqual(key, dc.idempotency_key(run, "charge", UNROUTED, "invoice:inv_7"))
        self.assertEqual((self.own_rows("inv_7"), self.outbox_rows(key)), (1, 1))
        row = self.outbox(key)
        self.assertEqual(row[:4], (run, "charge", UNROUTED, "invoice:inv_7"))
        self.assertEqual(json.loads(row[5]), {"invoice_id": "inv_7", "amount_cents": 500, "currency": "eur"})

        # The step retried: same key, not created again.
        with self.conn.transaction(), dc.agent_step(self.conn, run, "charge", schema=SCHEMA):
            self.assertEqual(charge.enqueue(invoice_id="inv_7", amount_cents=500), (key, False))
        # The same call with other arguments in that step and scope.
        with self.assertRaises(errors.UniqueViolation):
            with self.conn.transaction(), dc.agent_step(self.conn, run, "charge", schema=SCHEMA):
                charge("inv_7", amount_cents=900)
        self.assertEqual(ran, [])

    def test_rolls_back_with_the_caller(self):
        @dc.outbox_tool(UNROUTED)
        def tool(n: int) -> None:
            raise AssertionError("the body ran")

        run = unique("run")
        with self.assertRaises(RuntimeError):
            with self.conn.transaction(), dc.agent_step(self.conn, run, "s", schema=SCHEMA):
                self.own_write(self.conn, "inv_8")
                key = tool(1)
                raise RuntimeError("the agent failed")
        self.assertEqual((self.own_rows("inv_8"), self.outbox_rows(key)), (0, 0))


if __name__ == "__main__":
    unittest.main()
