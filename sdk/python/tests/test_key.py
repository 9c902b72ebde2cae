"""The idempotency key: every shared vector, and the JCS escaping rules."""

from __future__ import annotations

import hashlib
import json
import unittest

import support

import drainer_client as dc

REPO_VECTORS = support.REPO_ROOT / "idemkey" / "testdata" / "key-vectors.json"
SHARED_VECTORS = support.REPO_ROOT.parent / "shared" / "key-vectors.json"


def load_vectors(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    vectors = doc["vectors"]
    if not vectors:
        raise AssertionError(f"{path} has no vectors")
    return vectors


class KeyVectorsTest(unittest.TestCase):
    def check(self, vectors):
        for i, v in enumerate(vectors):
            args = (v["agent_run_id"], v["step_id"], v["tool_name"], v["business_scope"])
            with self.subTest(vector=i, key=v["key"]):
                self.assertEqual(dc.canonical_tuple(*args), v["canonical"])
                self.assertEqual(dc.idempotency_key(*args), v["key"])

    def test_repo_vectors(self):
        vectors = load_vectors(REPO_VECTORS)
        self.check(vectors)
        # The vectors cover what makes JCS differ from naive JSON.
        canon = "".join(v["canonical"] for v in vectors)
        for needle in ("\u2028", "\x7f", "/", "\\u0001", "\\t", "\\n", '\\"', "\\\\", "日本語"):
            self.assertIn(needle, canon)
        self.assertIn(("", "", "", ""), [(v["agent_run_id"], v["step_id"], v["tool_name"], v["business_scope"]) for v in vectors])

    def test_shared_vectors_match_repo_copy(self):
        # ../shared exists next to the main checkout of this project; a clean
        # clone has only the repo copy, which test_repo_vectors checks.
        if not SHARED_VECTORS.exists():
            self.assertTrue(REPO_VECTORS.exists())
            return
        self.assertEqual(load_vectors(SHARED_VECTORS), load_vectors(REPO_VECTORS))
        self.check(load_vectors(SHARED_VECTORS))


class CanonicalFormTest(unittest.TestCase):
    def test_escaping(self):
        cases = {
            "plain": '"plain"',
            'q"b\\': '"q\\"b\\\\"',
            "\b\f\n\r\t": '"\\b\\f\\n\\r\\t"',
            "\x00\x01\x0b\x1f": '"\\u0000\\u0001\\u000b\\u001f"',  # lower-case hex
            "\x7f": '"\x7f"',
            "a/b": '"a/b"',
            "\u2028\u2029": '"\u2028\u2029"',
            "é🚀日": '"é🚀日"',
            "\x20": '" "',
        }
        for raw, want in cases.items():
            with self.subTest(raw=raw):
                got = dc.canonical_tuple(raw, "", "", "")
                self.assertEqual(got, '{"agent_run_id":' + want + ',"business_scope":"","step_id":"","tool_name":""}')

    def test_field_order_is_sorted(self):
        self.assertEqual(
            dc.canonical_tuple("R", "S", "T", "B"),
            '{"agent_run_id":"R","business_scope":"B","step_id":"S","tool_name":"T"}',
        )

    def test_key_shape(self):
        key = dc.idempotency_key("run", "step", "tool", "scope")
        self.assertRegex(key, r"\Aidem_v1_[0-9a-f]{32}\Z")
        canonical = dc.canonical_tuple("run", "step", "tool", "scope")
        self.assertEqual(key, "idem_v1_" + hashlib.sha256(canonical.encode()).hexdigest()[:32])

    def test_stable_and_distinct(self):
        a = dc.idempotency_key("run", "step", "tool", "scope")
        self.assertEqual(a, dc.idempotency_key("run", "step", "tool", "scope"))
        # Moving text between fields changes the key: the canonical form is
        # unambiguous.
        self.assertNotEqual(a, dc.idempotency_key("run", "step", "toolscope", ""))
        self.assertNotEqual(a, dc.idempotency_key("step", "run", "tool", "scope"))

    def test_accepts_what_enqueue_refuses(self):
        # The key function accepts any strings (docs/reference.md §1).
        dc.idempotency_key("", "", "", "")
        dc.idempotency_key("a\x00b", "x" * 5000, "", "")

    def test_refuses_what_has_no_utf8_form(self):
        with self.assertRaises(dc.InvalidTuple) as cm:
            dc.idempotency_key("run", "st\ud800ep", "tool", "")
        self.assertEqual(cm.exception.field, "step_id")
        self.assertIn("lone surrogate", str(cm.exception))
        with self.assertRaises(dc.InvalidTuple) as cm:
            dc.idempotency_key("run", "step", b"tool", "")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "tool_name")
        self.assertIn("must be a str, not bytes", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
