"""Tuple and argument validation: typed errors, raised before the database is touched."""

from __future__ import annotations

import unittest

import support  # noqa: F401  (puts src/ on sys.path)

import drainer_client as dc


class Untouchable:
    """Stands in for a connection: any use of it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"the connection was used (.{name}) before validation finished")


GOOD = ("run_1", "step_1", "charge_card", "invoice:1")


def enqueue(*fields, payload=None, **kwargs):
    return dc.enqueue(Untouchable(), *fields, {} if payload is None else payload, **kwargs)


class TupleValidationTest(unittest.TestCase):
    def assertInvalid(self, fields, field, fragment):
        with self.assertRaises(dc.InvalidTuple) as cm:
            enqueue(*fields)
        err = cm.exception
        self.assertEqual(err.field, field)
        self.assertIn(fragment, err.reason)
        self.assertIn(field, str(err))
        self.assertIsInstance(err, dc.DrainerError)
        self.assertIsInstance(err, ValueError)
        return err

    def test_required_fields_non_empty(self):
        for i, name in enumerate(("agent_run_id", "step_id", "tool_name")):
            fields = list(GOOD)
            fields[i] = ""
            with self.subTest(field=name):
                self.assertInvalid(fields, name, "must not be empty")

    def test_business_scope_may_be_empty(self):
        dc.validate_tuple("run", "step", "tool", "")

    def test_nul(self):
        for i, name in enumerate(dc._key.TUPLE_FIELDS):
            fields = list(GOOD)
            fields[i] = "a\x00b"
            with self.subTest(field=name):
                self.assertInvalid(fields, name, "NUL")

    def test_size_in_utf8_bytes(self):
        for i, name in enumerate(dc._key.TUPLE_FIELDS):
            with self.subTest(field=name):
                fields = list(GOOD)
                fields[i] = "x" * 1024
                dc.validate_tuple(*fields)  # exactly the limit
                fields[i] = "x" * 1025
                self.assertInvalid(fields, name, "1025 bytes")
                # 342 characters, 1026 bytes: the limit counts bytes.
                fields[i] = "日" * 342
                self.assertInvalid(fields, name, "1026 bytes")

    def test_lone_surrogate(self):
        self.assertInvalid(("run", "step", "tool", "scope\udfff"), "business_scope", "not valid UTF-8")

    def test_not_str(self):
        for bad in (None, b"run", 7):
            with self.subTest(value=bad):
                self.assertInvalid((bad, "step", "tool", ""), "agent_run_id", "must be a str")
        self.assertInvalid(("run", "step", "tool", None), "business_scope", "must be a str, not NoneType")

    def test_every_problem_reported(self):
        err = self.assertInvalid(("", "s\x00", "t" * 2000, 3), "agent_run_id", "must not be empty")
        self.assertEqual([f for f, _ in err.problems], ["agent_run_id", "step_id", "tool_name", "business_scope"])

    def test_tuple_checked_before_payload(self):
        with self.assertRaises(dc.InvalidTuple):
            enqueue("", "step", "tool", "", payload={1, 2})


class ArgumentValidationTest(unittest.TestCase):
    def test_schema_name(self):
        for bad in ("", "Drainer", 'x"; DROP TABLE y; --', "1abc", "a" * 64, None):
            with self.subTest(schema=bad):
                with self.assertRaises(dc.UsageError) as cm:
                    enqueue(*GOOD, schema=bad)
                self.assertIn("schema", str(cm.exception))
                with self.assertRaises(dc.UsageError):
                    dc.result(Untouchable(), "idem_v1_x", schema=bad)
                with self.assertRaises(dc.UsageError):
                    dc.wait(Untouchable(), "idem_v1_x", 1, schema=bad)

    def test_max_payload_bytes(self):
        for bad in (0, -1, 1.5, True, "10"):
            with self.subTest(max_payload_bytes=bad):
                with self.assertRaises(dc.UsageError):
                    enqueue(*GOOD, max_payload_bytes=bad)

    def test_traceparent(self):
        for bad in ("", "tp\n", "é", 5):
            with self.subTest(traceparent=bad):
                with self.assertRaises(dc.UsageError):
                    enqueue(*GOOD, traceparent=bad)

    def test_not_a_connection(self):
        with self.assertRaises(dc.UsageError) as cm:
            dc.enqueue(object(), *GOOD, {})  # type: ignore[arg-type]
        self.assertIn("psycopg.Connection", str(cm.exception))

    def test_result_and_wait_arguments(self):
        for bad_key in ("", None, 5):
            with self.subTest(key=bad_key):
                with self.assertRaises(dc.UsageError):
                    dc.result(Untouchable(), bad_key)
                with self.assertRaises(dc.UsageError):
                    dc.wait(Untouchable(), bad_key, 1)
        for kwargs in ({"timeout": -1}, {"timeout": float("nan")}, {"timeout": float("inf")},
                       {"timeout": 1, "min_poll": 0}, {"timeout": 1, "min_poll": 2, "max_poll": 1}):
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(dc.UsageError):
                    dc.wait(Untouchable(), "idem_v1_x", **kwargs)


if __name__ == "__main__":
    unittest.main()
