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
        for value, text in ((None, "null"), ("s", '"s"'), (3, "3"), ([], "[]"), ({}, "{}")):
            self.assertEqual(dc.serialize_payload(value), text)

    def test_not_serialisable_named_by_path(self):
        when = datetime.datetime(2026, 1, 1)
        self.refused({"card": SECRET, "at": when}, "payload['at']", "datetime.datetime")
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
            dc.serialize_payload("é" * 10, max_bytes=21)
        self.assertEqual(cm.exception.size, 22)
        # A custom limit, and None to leave the limit to the database.
        with self.assertRaises(dc.PayloadTooLarge):
            dc.enqueue(Untouchable(), *GOOD, {"a": "x" * 100}, max_payload_bytes=50)
        dc.serialize_payload("x" * (limit + 10), max_bytes=None)


if __name__ == "__main__":
    unittest.main()
