"""Payload serialisation: typed errors naming where, never what."""

from __future__ import annotations

import datetime
import decimal
import json
import unittest

import support  # noqa: F401

import drainer_client as dc
from test_validation import GOOD, Untouchable

SECRET = "4242-4242-4242-4242"


class PayloadTest(unittest.TestCase):
    def refused(self, payload, path, fragment, **kwargs):
        with self.assertRaises(dc.PayloadError) as cm:
            dc.enqueue(Untouchable(), *GOOD, payload, **kwargs)
        err = cm.exception
        self.assertEqual(err.path, path)
        self.assertIn(fragment, str(err))
        self.assertIsInstance(err, dc.DrainerError)
        self.assertNotIn(SECRET, str(err))
        self.assertNotIn(SECRET, repr(err))
        return err

    def test_compact_sorted_raw_utf8(self):
        text = dc.serialize_payload({"b": [1, 2.5, None, True], "a": "é/\u2028", "c": {"z": 1, "y": (2,)}})
        self.assertEqual(text, '{"a":"é/\u2028","b":[1,2.5,null,true],"c":{"y":[2],"z":1}}')
        self.assertEqual(json.loads(text)["c"]["y"], [2])

    def test_any_json_value(self):
        for value, text in ((None, "null"), (dc.JSONString("s"), '"s"'), (3, "3"), ([], "[]"), ({}, "{}")):
            self.assertEqual(dc.serialize_payload(value), text)

    def test_not_serialisable_named_by_path(self):
        self.refused({"card": SECRET, "at": datetime.time(12, 0)}, "payload['at']", "datetime.time")
        self.refused({"card": SECRET, "for": datetime.timedelta(1)}, "payload['for']", "datetime.timedelta")
        err = self.refused({"items": [1, 2, {"tags": {1, 2}}], "card": SECRET}, "payload['items'][2]['tags']", "builtins.set")
        self.assertIn("not JSON-serialisable", str(err))
        self.refused(decimal.Decimal("1.5"), "payload", "decimal.Decimal")
        self.refused({"raw": SECRET.encode()}, "payload['raw']", "bytes")
        self.refused(object(), "payload", "builtins.object")

    def test_non_finite_float(self):
        self.refused({"amount": float("nan")}, "payload['amount']", "nan")
        self.refused([float("inf")], "payload[0]", "inf")

    def test_non_str_key(self):
        self.refused({"a": {1: SECRET}}, "payload['a']", "key of type int")

    def test_nul_and_lone_surrogate(self):
        self.refused({"note": SECRET + "\x00"}, "payload['note']", "NUL")
        self.refused({"note": SECRET + "\ud800"}, "payload['note']", "lone surrogate")

    def test_cycle_and_depth(self):
        loop: list = [SECRET]
        loop.append(loop)
        self.refused(loop, "payload[1]", "circular")
        deep: list = []
        for _ in range(dc._payload.MAX_PAYLOAD_DEPTH + 1):
            deep = [deep]
        self.refused(deep, "payload" + "[0]" * dc._payload.MAX_PAYLOAD_DEPTH, "nested more than")

    def test_too_large(self):
        limit = dc.DEFAULT_MAX_PAYLOAD_BYTES
        self.assertEqual(limit, 1 << 20)
        overhead = len('{"blob":""}')
        dc.serialize_payload({"blob": "x" * (limit - overhead)})  # exactly the limit
        with self.assertRaises(dc.PayloadTooLarge) as cm:
            dc.enqueue(Untouchable(), *GOOD, {"blob": "x" * (limit - overhead + 1)})
        self.assertEqual((cm.exception.size, cm.exception.limit), (limit + 1, limit))
        self.assertIn("drainer.max_payload_bytes", str(cm.exception))
        self.assertIsInstance(cm.exception, dc.PayloadError)
        # Bytes of UTF-8, not characters.
        with self.assertRaises(dc.PayloadTooLarge) as cm:
            dc.serialize_payload(dc.JSONString("é" * 10), max_bytes=21)
        self.assertEqual(cm.exception.size, 22)
        # A custom limit, and None to leave the limit to the database.
        with self.assertRaises(dc.PayloadTooLarge):
            dc.enqueue(Untouchable(), *GOOD, {"a": "x" * 100}, max_payload_bytes=50)
        dc.serialize_payload(dc.JSONString("x" * (limit + 10)), max_bytes=None)


class StrPayloadTest(unittest.TestCase):
    """A str payload is json.dumps(obj) by mistake: refused; JSONString says it is meant."""

    def test_str_payload_refused(self):
        obj = {"invoice_id": "inv_1", "card": SECRET}
        for payload in (json.dumps(obj), "hello", "", json.dumps("hello")):
            with self.subTest(payload=payload[:20]):
                with self.assertRaises(dc.PayloadError) as cm:
                    dc.enqueue(Untouchable(), *GOOD, payload)
                err = cm.exception
                self.assertEqual(err.path, "payload")
                self.assertIsInstance(err, ValueError)
                msg = str(err)
                self.assertIn("is a str", msg)
                self.assertIn("pass the object itself", msg)
                self.assertIn("json.dumps(obj)", msg)
                self.assertIn("JSONString", msg)
                self.assertNotIn(SECRET, msg)
                with self.assertRaises(dc.PayloadError):
                    dc.serialize_payload(payload)
        # A str subclass is a str too.
        with self.assertRaises(dc.PayloadError):
            dc.serialize_payload(type("Text", (str,), {})("x"))

    def test_str_values_inside_a_payload_are_fine(self):
        self.assertEqual(dc.serialize_payload({"note": "hello", "tags": ["a"]}), '{"note":"hello","tags":["a"]}')

    def test_json_string_wrapper(self):
        self.assertEqual(dc.serialize_payload(dc.JSONString("hello")), '"hello"')
        self.assertEqual(dc.serialize_payload(dc.JSONString("")), '""')
        # The value is a string, not JSON text to parse.
        self.assertEqual(dc.serialize_payload(dc.JSONString('{"a":1}')), '"{\\"a\\":1}"')
        self.assertEqual(json.loads(dc.serialize_payload(dc.JSONString('{"a":1}'))), '{"a":1}')
        # Inside a payload it is the plain string.
        self.assertEqual(dc.serialize_payload({"s": dc.JSONString("x")}), '{"s":"x"}')
        # The string rules still apply, and it holds only a str.
        with self.assertRaises(dc.PayloadError) as cm:
            dc.serialize_payload(dc.JSONString("a\x00"))
        self.assertIn("NUL", str(cm.exception))
        with self.assertRaises(TypeError):
            dc.JSONString({"a": 1})  # type: ignore[arg-type]
        self.assertEqual(dc.JSONString("x"), dc.JSONString("x"))
        self.assertNotEqual(dc.JSONString("x"), "x")
        with self.assertRaises(AttributeError):
            dc.JSONString("x").value = "y"  # type: ignore[misc]


UTC = datetime.timezone.utc


class DatesTest(unittest.TestCase):
    """datetime and date in a payload: what JSON.stringify writes for a JS Date (toISOString)."""

    def text(self, value):
        return json.loads(dc.serialize_payload({"at": value}))["at"]

    def test_aware_datetime_is_javascripts_iso_string(self):
        # Each expected string is what node prints for the same instant, e.g.
        # new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6)).toISOString().
        cases = [
            (datetime.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC), "2026-01-02T03:04:05.006Z"),
            (datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05.000Z"),
            # Converted to UTC: new Date("2026-03-29T01:30:00.999+02:00").toISOString()
            (datetime.datetime(2026, 3, 29, 1, 30, 0, 999000, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
             "2026-03-28T23:30:00.999Z"),
            # new Date("2026-01-01T00:00:00-05:30").toISOString()
            (datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone(-datetime.timedelta(hours=5, minutes=30))),
             "2026-01-01T05:30:00.000Z"),
            # Four-digit years: d.setUTCFullYear(1, 1, 3) gives 0001-02-03T00:00:00.000Z
            (datetime.datetime(1, 2, 3, tzinfo=UTC), "0001-02-03T00:00:00.000Z"),
            (datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "9999-12-31T23:59:59.999Z"),
        ]
        for value, want in cases:
            with self.subTest(value=value.isoformat()):
                self.assertEqual(self.text(value), want)

    def test_sub_millisecond_digits_are_truncated(self):
        # new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6.789)).toISOString() == "2026-01-02T03:04:05.006Z"
        self.assertEqual(self.text(datetime.datetime(2026, 1, 2, 3, 4, 5, 6789, tzinfo=UTC)), "2026-01-02T03:04:05.006Z")
        # Toward the earlier time, also before 1970:
        # new Date(Date.UTC(1969, 11, 31, 23, 59, 59, 999.9)).toISOString() == "1969-12-31T23:59:59.999Z"
        self.assertEqual(self.text(datetime.datetime(1969, 12, 31, 23, 59, 59, 999900, tzinfo=UTC)), "1969-12-31T23:59:59.999Z")
        # So a retried step that rebuilds the same instant stores the same payload.
        a = datetime.datetime(2026, 1, 2, 3, 4, 5, 6001, tzinfo=UTC)
        b = datetime.datetime(2026, 1, 2, 4, 4, 5, 6999, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
        self.assertEqual(dc.serialize_payload({"at": a}), dc.serialize_payload({"at": b}))

    def test_zoneinfo(self):
        try:
            from zoneinfo import ZoneInfo

            paris = ZoneInfo("Europe/Paris")
        except Exception:  # no tz database on this machine: the fixed offsets above cover it
            paris = datetime.timezone(datetime.timedelta(hours=2))
        self.assertEqual(self.text(datetime.datetime(2026, 7, 1, 12, 0, tzinfo=paris)), "2026-07-01T10:00:00.000Z")

    def test_date(self):
        self.assertEqual(self.text(datetime.date(2026, 1, 2)), "2026-01-02")
        self.assertEqual(self.text(datetime.date(1, 1, 1)), "0001-01-01")
        self.assertEqual(dc.serialize_payload([datetime.date(2026, 12, 31)]), '["2026-12-31"]')

    def test_naive_datetime_refused(self):
        err = PayloadTest.refused(self, {"card": SECRET, "due": datetime.datetime(2026, 1, 1, 9, 0)}, "payload['due']", "naive")
        self.assertIn("ambiguous", str(err))
        self.assertIn("timezone.utc", str(err))
        # A tzinfo that gives no offset is naive too.

        class NoOffset(datetime.tzinfo):
            def utcoffset(self, dt):
                return None

        PayloadTest.refused(self, [datetime.datetime(2026, 1, 1, tzinfo=NoOffset())], "payload[0]", "naive")
        # At the top level as well.
        PayloadTest.refused(self, datetime.datetime(2026, 1, 1), "payload", "naive")

    def test_out_of_range_in_utc(self):
        east = datetime.timezone(datetime.timedelta(hours=1))
        PayloadTest.refused(self, {"at": datetime.datetime(1, 1, 1, 0, 30, tzinfo=east)}, "payload['at']", "years 1 to 9999")

    def test_at_the_top_level(self):
        self.assertEqual(dc.serialize_payload(datetime.date(2026, 1, 2)), '"2026-01-02"')
        self.assertEqual(dc.serialize_payload(datetime.datetime(2026, 1, 2, tzinfo=UTC)), '"2026-01-02T00:00:00.000Z"')


if __name__ == "__main__":
    unittest.main()
