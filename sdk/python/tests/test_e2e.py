"""The whole path: enqueue in the agent's transaction, `drainer run` dispatches, wait reads the outcome.

Needs DRAINER_TEST_DATABASE_URL, DRAINER_TEST_SCHEMA and DRAINER_TEST_DAEMON=1
with a `drainer run` on that database whose config routes (as
integration/sdk_python_test.go does):

- py_charge_card, py_send_email: a provider answering 200 with
  {"id": "mock_" + sha256("mockprovider:" + key)[:24 hex], "tool": ..., "received": payload}
- py_refused: a provider always answering 422 (terminal)
- py_unsure: a non_idempotent route whose provider always answers 503, so
  the row parks as outcome_unknown
"""

from __future__ import annotations

import hashlib

import psycopg
from psycopg import pq, sql

import support
from support import SCHEMA, unique

import drainer_client as dc
from test_db import OwnTableMixin

# Generous: a bound on a hung daemon, not an expectation of speed.
WAIT = 120


def provider_id(key: str) -> str:
    return "mock_" + hashlib.sha256(("mockprovider:" + key).encode()).hexdigest()[:24]


class EndToEndTest(OwnTableMixin, support.DaemonTestCase):
    def test_agent_write_intent_and_outcome(self):
        run = unique("run")
        payload = {"invoice_id": "inv_1", "amount_cents": 500, "memo": "café ☕"}
        with self.conn.transaction():
            self.own_write(self.conn, "inv_1")
            key, created = dc.enqueue(self.conn, run, "charge", "py_charge_card", "invoice:inv_1", payload, schema=SCHEMA)
        self.assertTrue(created)
        status, response, last_error = dc.wait(self.conn, key, WAIT, schema=SCHEMA)
        self.assertEqual(status, "succeeded", last_error)
        self.assertEqual(response, {"id": provider_id(key), "tool": "py_charge_card", "received": payload})
        self.assertEqual(self.own_rows("inv_1"), 1)
        self.assertEqual(self.conn.info.transaction_status, pq.TransactionStatus.IDLE)
        # result reads the same outcome; a retried step changes nothing.
        self.assertEqual(dc.result(self.conn, key, schema=SCHEMA), (status, response, last_error))
        self.conn.rollback()
        with self.conn.transaction():
            self.assertEqual(
                dc.enqueue(self.conn, run, "charge", "py_charge_card", "invoice:inv_1", payload, schema=SCHEMA),
                (key, False),
            )
        self.assertEqual(dc.wait(self.conn, key, WAIT, schema=SCHEMA), (status, response, last_error))

    def test_autocommit_connection(self):
        conn = self.connect(autocommit=True)
        run = unique("run")
        with conn.transaction():
            self.own_write(conn, "inv_2")
            key, _ = dc.enqueue(conn, run, "notify", "py_send_email", "customer:c_1", ["a@example.com"], schema=SCHEMA)
        out = dc.wait(conn, key, WAIT, schema=SCHEMA)
        self.assertEqual(out.status, "succeeded", out.last_error)
        self.assertEqual(out.response["received"], ["a@example.com"])

    def test_terminal_failure(self):
        run = unique("run")
        with self.conn.transaction():
            key, _ = dc.enqueue(self.conn, run, "refuse", "py_refused", "", {"n": 1}, schema=SCHEMA)
        status, response, last_error = dc.wait(self.conn, key, WAIT, schema=SCHEMA)
        self.assertEqual(status, "failed")
        self.assertIsNone(response)
        self.assertTrue(last_error)
        self.assertIn("422", last_error)

    def test_parked_outcome_unknown(self):
        run = unique("run")
        with self.conn.transaction():
            key, _ = dc.enqueue(self.conn, run, "unsure", "py_unsure", "", {"n": 1}, schema=SCHEMA)
        status, response, last_error = dc.wait(self.conn, key, WAIT, schema=SCHEMA)
        self.assertEqual(status, "outcome_unknown")
        self.assertIn(status, dc.PARKED_STATUSES)
        self.assertIsNone(response)
        self.assertTrue(last_error)

    def test_decorated_tool(self):
        ran = []

        @dc.outbox_tool("py_charge_card", scope=lambda invoice_id, **_: f"invoice:{invoice_id}")
        def charge_card(invoice_id: str, amount_cents: int) -> None:
            ran.append(invoice_id)

        run = unique("run")
        with self.conn.transaction(), dc.agent_step(self.conn, run, "charge", schema=SCHEMA):
            self.own_write(self.conn, "inv_3")
            key = charge_card(invoice_id="inv_3", amount_cents=700)
        out = dc.wait(self.conn, key, WAIT, schema=SCHEMA)
        self.assertEqual(out.status, "succeeded", out.last_error)
        self.assertEqual(out.response["received"], {"invoice_id": "inv_3", "amount_cents": 700})
        self.assertEqual(out.response["id"], provider_id(key))
        self.assertEqual(ran, [], "the tool body ran in the agent")

    def test_rolled_back_intent_is_never_dispatched(self):
        run = unique("run")
        with self.assertRaises(RuntimeError):
            with self.conn.transaction():
                key, _ = dc.enqueue(self.conn, run, "charge", "py_charge_card", "invoice:gone", {"n": 1}, schema=SCHEMA)
                raise RuntimeError("the agent failed")
        # A later intent of the same run is dispatched; the rolled-back one
        # never existed.
        with self.conn.transaction():
            later, _ = dc.enqueue(self.conn, run, "later", "py_charge_card", "invoice:later", {"n": 2}, schema=SCHEMA)
        self.assertEqual(dc.wait(self.conn, later, WAIT, schema=SCHEMA).status, "succeeded")
        self.assertIsNone(dc.result(self.conn, key, schema=SCHEMA))
        self.conn.rollback()
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            n = c.execute(sql.SQL("SELECT count(*) FROM {}.audit WHERE key = %s").format(sql.Identifier(SCHEMA)), [key]).fetchone()
        self.assertEqual(n, (0,))
