"""@outbox_tool and agent_step without a database: binding, scope, context, refusals."""

from __future__ import annotations

import contextvars
import threading
import unittest

import support  # noqa: F401

import drainer_client as dc
from test_validation import Untouchable

ran = []


@dc.outbox_tool("charge_card", scope=lambda invoice_id, **_: f"invoice:{invoice_id}")
def charge_card(invoice_id: str, amount_cents: int, currency: str = "eur") -> dict:
    """Charge an invoice."""
    ran.append("charge_card")
    return {"charged": amount_cents}


@dc.outbox_tool("notify", scope="customers")
def notify(*recipients: str, **fields: object) -> None:
    ran.append("notify")


class OutboxToolTest(unittest.TestCase):
    def setUp(self):
        ran.clear()

    def test_wraps(self):
        self.assertEqual(charge_card.__name__, "charge_card")
        self.assertEqual(charge_card.__doc__, "Charge an invoice.")
        self.assertEqual(charge_card.tool_name, "charge_card")
        self.assertIn("charge_card", repr(charge_card))
        # The body stays reachable for the provider side, and is the original.
        self.assertEqual(charge_card.__wrapped__("inv_1", 5), {"charged": 5})
        self.assertEqual(ran, ["charge_card"])

    def test_arguments_are_the_payload(self):
        self.assertEqual(
            charge_card.arguments("inv_1", amount_cents=500),
            {"invoice_id": "inv_1", "amount_cents": 500, "currency": "eur"},
        )
        self.assertEqual(notify.arguments("a@x", "b@x", subject="hi"), {"recipients": ["a@x", "b@x"], "subject": "hi"})
        with self.assertRaises(TypeError):
            charge_card.arguments("inv_1")  # missing amount_cents, as the call itself
        with self.assertRaises(TypeError):
            charge_card.arguments("inv_1", 1, nope=2)

    def test_scope(self):
        args = charge_card.arguments("inv_9", 1)
        self.assertEqual(charge_card.business_scope(args), "invoice:inv_9")
        self.assertEqual(notify.business_scope(notify.arguments()), "customers")

        @dc.outbox_tool("plain")
        def plain(x: int) -> None: ...

        self.assertEqual(plain.business_scope({"x": 1}), "")

        @dc.outbox_tool("bad_scope", scope=lambda x: x)
        def bad_scope(x: object) -> None: ...

        with self.assertRaises(dc.InvalidTuple) as cm:
            bad_scope.business_scope({"x": 5})
        self.assertEqual(cm.exception.field, "business_scope")

    def test_outside_agent_step(self):
        with self.assertRaises(dc.UsageError) as cm:
            charge_card("inv_1", 500)
        self.assertIn("agent_step", str(cm.exception))
        self.assertEqual(ran, [])

    def test_refused_payload_never_runs_the_body_nor_touches_the_connection(self):
        with dc.agent_step(Untouchable(), "run_1", "step_1"):
            with self.assertRaises(dc.PayloadError) as cm:
                charge_card("inv_1", amount_cents={1, 2})
            self.assertEqual(cm.exception.path, "payload['amount_cents']")
            with self.assertRaises(dc.InvalidTuple) as cm:
                charge_card("x" * 2000, 1)
            self.assertEqual(cm.exception.field, "business_scope")
        self.assertEqual(ran, [])

    def test_decoration_refusals(self):
        with self.assertRaises(dc.InvalidTuple) as cm:
            dc.outbox_tool("")
        self.assertEqual(cm.exception.field, "tool_name")
        with self.assertRaises(dc.InvalidTuple):
            dc.outbox_tool("t\x00")
        with self.assertRaises(dc.InvalidTuple) as cm:
            dc.outbox_tool("t", scope="s" * 1025)
        self.assertEqual(cm.exception.field, "business_scope")
        with self.assertRaises(TypeError):
            dc.outbox_tool("t", scope=5)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):

            @dc.outbox_tool("async_tool")
            async def async_tool() -> None: ...


class AgentStepTest(unittest.TestCase):
    def test_sets_and_resets(self):
        conn = Untouchable()
        self.assertIsNone(dc.current_step())
        with dc.agent_step(conn, "run_1", "step_1", schema="other") as outer:
            self.assertIs(dc.current_step(), outer)
            self.assertEqual((outer.agent_run_id, outer.step_id, outer.schema), ("run_1", "step_1", "other"))
            with dc.agent_step(conn, "run_1", "step_2") as inner:
                self.assertIs(dc.current_step(), inner)
            self.assertIs(dc.current_step(), outer)
        self.assertIsNone(dc.current_step())

    def test_reset_on_error(self):
        with self.assertRaises(RuntimeError):
            with dc.agent_step(Untouchable(), "run_1", "step_1"):
                raise RuntimeError("boom")
        self.assertIsNone(dc.current_step())

    def test_validates_run_and_step(self):
        with self.assertRaises(dc.InvalidTuple) as cm:
            with dc.agent_step(Untouchable(), "", "step"):
                pass
        self.assertEqual(cm.exception.field, "agent_run_id")
        with self.assertRaises(dc.InvalidTuple) as cm:
            with dc.agent_step(Untouchable(), "run", "s\x00"):
                pass
        self.assertEqual(cm.exception.field, "step_id")

    def test_local_to_thread_and_context(self):
        seen = []
        with dc.agent_step(Untouchable(), "run_1", "step_1"):
            t = threading.Thread(target=lambda: seen.append(dc.current_step()))
            t.start()
            t.join()
            # A copied context carries the step, as asyncio tasks get it.
            seen.append(contextvars.copy_context().run(dc.current_step))
        self.assertIsNone(seen[0])
        self.assertEqual(seen[1].step_id, "step_1")


if __name__ == "__main__":
    unittest.main()
