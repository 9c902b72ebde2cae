"""drainer_client.receiver: the ASGI idempotency receiver (docs/receiver.md).

The fingerprint tests need nothing; the others need DRAINER_TEST_DATABASE_URL
(each test works in a schema of its own, dropped afterwards). The ASGI app is
driven directly, and once through a real HTTP/1.1 server (the stdlib server
of examples/receiver/python).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import select
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg import sql

import support
from support import unique

import drainer_client as dc
from drainer_client import receiver as rcv
from drainer_client._jcs import es6_number

VECTORS = support.REPO_ROOT / "receiver" / "testdata" / "fingerprint-vectors.json"
EXAMPLE = support.REPO_ROOT / "examples" / "receiver" / "python"
CRASH_CHILD = support.HERE / "receiver_crash_child.py"


class FingerprintTest(unittest.TestCase):
    def test_vectors_match_go(self) -> None:
        vectors = json.loads(VECTORS.read_text(encoding="utf-8"))
        self.assertGreater(len(vectors), 10)
        for v in vectors:
            with self.subTest(v["name"]):
                body = v["body"].encode("utf-8")
                self.assertEqual(rcv.canonical_body(v["content_type"], body).decode("utf-8"), v["canonical"])
                self.assertEqual(rcv.fingerprint(v["method"], v["path"], v["content_type"], body).hex(), v["fingerprint"])

    def test_es6_numbers(self) -> None:
        for x, want in [(1.0, "1"), (-0.0, "0"), (1e21, "1e+21"), (1e20, "100000000000000000000"), (1e-7, "1e-7"),
                        (0.000001, "0.000001"), (123.456, "123.456"), (-1.5e-10, "-1.5e-10"), (5e-324, "5e-324"),
                        (1.7976931348623157e308, "1.7976931348623157e+308"), (0.1 + 0.2, "0.30000000000000004"),
                        (4.35, "4.35"), (2 ** 53, "9007199254740992"), (1.5e300, "1.5e+300")]:
            self.assertEqual(es6_number(x), want, x)

    def test_check_key(self) -> None:
        self.assertIsNone(rcv.check_key("k" * 255))
        self.assertIsNone(rcv.check_key("ключ é"))
        for bad in ["", "k" * 256, "é" * 128, "a\nb", "a\x7fb", "a\x00b"]:
            self.assertIsNotNone(rcv.check_key(bad), repr(bad))

    def test_bad_options(self) -> None:
        with self.assertRaises(ValueError) as cm:
            rcv.Receiver("postgresql://x", mode="strict", ttl=-1, max_body=-1)
        for name in ("mode", "ttl", "max_body"):
            self.assertIn(name, str(cm.exception))


Answer = Tuple[int, Dict[str, str], bytes]


async def call(app: Any, method: str, path: str, headers: Sequence[Tuple[str, str]] = (),
               chunks: Sequence[bytes] = (b"",)) -> Answer:
    """Drive an ASGI app with one request; the body arrives in chunks."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(k.lower().encode("utf-8"), v.encode("utf-8")) for k, v in headers]}
    never = asyncio.Event()

    async def receive() -> Dict[str, Any]:
        if pending:
            return pending.pop(0)
        await never.wait()
        return {"type": "http.disconnect"}

    out: Dict[str, Any] = {"headers": {}, "body": b""}

    async def send(msg: Dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            out["status"] = msg["status"]
            for k, v in msg["headers"]:
                out["headers"][k.decode("latin-1")] = v.decode("latin-1")
        else:
            out["body"] += msg.get("body", b"")

    await app(scope, receive, send)
    return out.get("status", 0), out["headers"], out["body"]


class Orders:
    """An ASGI app counting its runs: 201 with a JSON body, or what the test sets."""

    def __init__(self) -> None:
        self.runs = 0
        self.status = 201
        self.fail: Optional[BaseException] = None
        self.gate: Optional[asyncio.Event] = None
        self.entered: Optional[asyncio.Event] = None
        self.seen: List[bytes] = []
        self.effect = None  # async (scope) -> None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.runs += 1
        n = self.runs
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        self.seen.append(body)
        if self.entered:
            self.entered.set()
        if self.gate:
            await self.gate.wait()
        if self.effect:
            await self.effect(scope)
        if self.fail:
            raise self.fail
        out = json.dumps({"run": n, "spacing": "kept"}, indent=1).encode()
        await send({"type": "http.response.start", "status": self.status,
                    "headers": [(b"content-type", b"application/json"), (b"location", b"/v1/orders/%d" % n),
                                (b"x-custom", b"kept"), (b"x-not-stored", b"dropped")]})
        await send({"type": "http.response.body", "body": out[:5], "more_body": True})
        await send({"type": "http.response.body", "body": out[5:]})


class ReceiverTestCase(support.DatabaseTestCase):
    """Each test gets a schema of its own."""

    def setUp(self) -> None:
        super().setUp()
        self.schema = unique("py_recv")
        self.receivers: List[rcv.Receiver] = []
        self.addCleanup(self._drop)

    def _drop(self) -> None:
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))

    def make(self, **opts: Any) -> Tuple[Any, Orders, rcv.Receiver]:
        r = rcv.Receiver(support.DATABASE_URL, schema=self.schema, store_headers=["X-Custom"], **opts)
        r.migrate()
        self.receivers.append(r)
        app = Orders()
        return r.wrap(app), app, r

    def records(self, where: str = "true") -> int:
        return self.count(f'SELECT count(*) FROM "{self.schema}".records WHERE {where}')

    def sql(self, q: str) -> None:
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(q.replace("RECORDS", f'"{self.schema}".records'))

    def run_async(self, coro: Any) -> Any:
        async def run() -> Any:
            try:
                return await coro
            finally:
                for r in self.receivers:
                    await r.aclose()

        return asyncio.run(run())

    def assertProblem(self, a: Answer, status: int, slug: str) -> None:
        self.assertEqual(a[0], status, a)
        self.assertEqual(a[1].get("content-type"), "application/problem+json")
        p = json.loads(a[2])
        self.assertEqual(p["type"], "https://drainer.dev/problems/" + slug)
        self.assertEqual(p["status"], status)
        self.assertTrue(p["title"] and p["detail"])


JSON = ("content-type", "application/json")


def post(app: Any, key: Optional[str], body: bytes = b"{}", path: str = "/v1/orders", extra: Sequence[Tuple[str, str]] = (),
         method: str = "POST", ctype: Tuple[str, str] = JSON) -> Any:
    headers = [ctype] + ([("idempotency-key", key)] if key is not None else []) + list(extra)
    return call(app, method, path, headers, [body])


class FlowTest(ReceiverTestCase):
    def test_first_then_replay(self) -> None:
        for mode, replay_status in (("seed", 200), ("ietf", 201)):
            with self.subTest(mode):
                self.schema = unique("py_recv")
                self.addCleanup(self._drop)
                app, orders, _ = self.make(mode=mode)

                async def go() -> None:
                    first = await post(app, "k1", b'{"amount":5}')
                    self.assertEqual(first[0], 201)
                    self.assertEqual(first[1]["idempotency-replay"], "false")
                    for _ in range(2):
                        again = await post(app, "k1", b'{ "amount" : 5.0 }')
                        self.assertEqual(again[0], replay_status)
                        self.assertEqual(again[2], first[2])
                        h = again[1]
                        self.assertEqual((h["idempotency-replay"], h["idempotent-replayed"]), ("true", "true"))
                        self.assertEqual((h["location"], h["x-custom"], h["content-type"]),
                                         ("/v1/orders/1", "kept", "application/json"))
                        self.assertNotIn("x-not-stored", h)
                    self.assertEqual(orders.runs, 1)

                self.run_async(go())

    def test_mismatch(self) -> None:
        for mode, status in (("seed", 409), ("ietf", 422)):
            with self.subTest(mode):
                self.schema = unique("py_recv")
                self.addCleanup(self._drop)
                app, orders, _ = self.make(mode=mode)

                async def go() -> None:
                    self.assertEqual((await post(app, "k", b'{"a":1}'))[0], 201)
                    for a in [await post(app, "k", b'{"a":2}'), await post(app, "k", b'{"a":1}', path="/v1/other"),
                              await post(app, "k", b'{"a":1}', method="PUT")]:
                        self.assertProblem(a, status, "payload-mismatch")
                        self.assertEqual(a[1]["idempotency-conflict"], "payload-mismatch")
                    self.assertEqual(orders.runs, 1)

                self.run_async(go())

    def test_non_json_bytes(self) -> None:
        app, orders, _ = self.make()

        async def go() -> None:
            text = ("content-type", "text/plain")
            self.assertEqual((await post(app, "k", b'{"a":1}', ctype=text))[0], 201)
            self.assertProblem(await post(app, "k", b'{"a": 1}', ctype=text), 409, "payload-mismatch")
            self.assertEqual((await post(app, "k", b'{"a":1}', ctype=text))[0], 200)

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_in_flight(self) -> None:
        app, orders, _ = self.make()

        async def go() -> None:
            orders.gate, orders.entered = asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(post(app, "k"))
            await orders.entered.wait()
            a = await post(app, "k")
            self.assertProblem(a, 409, "in-flight")
            self.assertEqual((a[1]["idempotency-conflict"], a[1]["retry-after"]), ("in-flight", "1"))
            orders.gate.set()
            self.assertEqual((await first)[0], 201)
            self.assertEqual((await post(app, "k"))[1]["idempotency-replay"], "true")

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_tuple_header(self) -> None:
        app, orders, _ = self.make()
        t = ("run-1", "s1", "charge", "inv:5")
        key = dc.idempotency_key(*t)
        enc = base64.urlsafe_b64encode(dc.canonical_tuple(*t).encode()).rstrip(b"=").decode()
        other = base64.urlsafe_b64encode(dc.canonical_tuple("run-1", "s2", "charge", "inv:5").encode()).rstrip(b"=").decode()

        async def go() -> None:
            self.assertEqual((await post(app, key, extra=[("x-agent-idempotency-tuple", enc)]))[0], 201)
            for bad in [other, "***", enc + "==", "eyJ4IjoxfQ", "bm90IGpzb24"]:
                self.assertProblem(await post(app, key, extra=[("x-agent-idempotency-tuple", bad)]), 400, "tuple-mismatch")
            self.assertProblem(await post(app, "other-key", extra=[("x-agent-idempotency-tuple", enc)]), 400, "tuple-mismatch")

        self.run_async(go())
        self.assertEqual(orders.runs, 1)
        self.assertEqual(self.records(), 1)

    def test_missing_and_invalid_key_and_pass_through(self) -> None:
        app, orders, _ = self.make()

        async def go() -> None:
            for m in ("POST", "PUT", "PATCH", "DELETE"):
                self.assertProblem(await post(app, None, method=m), 400, "missing-key")
            for bad in ["k" * 256, "a\tb", "a\x7fb"]:
                self.assertProblem(await post(app, bad), 400, "invalid-key")
            raw = await call(app, "POST", "/x", [("idempotency-key", "a"), ("idempotency-key", "b")])
            self.assertProblem(raw, 400, "invalid-key")
            self.assertEqual(orders.runs, 0)
            g = await call(app, "GET", "/x")
            self.assertEqual(g[0], 201)
            self.assertNotIn("idempotency-replay", g[1])
            self.assertEqual((await post(app, "k" * 255))[0], 201)

        self.run_async(go())
        # A key that is not UTF-8.
        scope_app = app

        async def latin() -> Answer:
            out: Dict[str, Any] = {}

            async def receive() -> Dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(m: Dict[str, Any]) -> None:
                out.setdefault("status", m.get("status"))

            await scope_app({"type": "http", "method": "POST", "path": "/", "headers": [(b"idempotency-key", b"\xff")]},
                            receive, send)
            return out["status"], {}, b""

        self.assertEqual(self.run_async(latin())[0], 400)
        self.assertEqual(orders.runs, 2)

    def test_too_large_and_chunks(self) -> None:
        app, orders, _ = self.make(max_body=64)

        async def go() -> None:
            self.assertProblem(await call(app, "POST", "/x", [("idempotency-key", "k"), ("content-length", "65")],
                                          [b"x" * 65]), 413, "too-large")
            self.assertProblem(await call(app, "POST", "/x", [("idempotency-key", "k")], [b"x" * 40, b"x" * 25]),
                               413, "too-large")
            self.assertEqual(self.records(), 0)
            self.assertEqual(orders.runs, 0)
            self.assertEqual((await call(app, "POST", "/x", [("idempotency-key", "k")], [b"x" * 32, b"y" * 32]))[0], 201)
            self.assertEqual(orders.seen[-1], b"x" * 32 + b"y" * 32)
            # Only the last chunk differs: a different request.
            self.assertEqual((await call(app, "POST", "/x", [("idempotency-key", "k")], [b"x" * 32, b"z" * 32]))[0], 409)
            self.assertEqual((await call(app, "POST", "/x", [("idempotency-key", "k")], [b"x" * 32, b"y" * 32]))[0], 200)

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_server_errors_not_stored(self) -> None:
        app, orders, _ = self.make()

        async def go() -> None:
            orders.status = 503
            self.assertEqual((await post(app, "k"))[0], 503)
            self.assertEqual(self.records(), 0)
            orders.status = 422
            self.assertEqual((await post(app, "k"))[0], 422)
            orders.status = 201
            a = await post(app, "k")
            self.assertEqual((a[0], a[1]["idempotency-replay"]), (422, "true"))

        self.run_async(go())
        self.assertEqual(orders.runs, 2)

        self.schema = unique("py_recv")
        self.addCleanup(self._drop)
        app, orders, _ = self.make(store_server_errors=True)

        async def go5() -> None:
            orders.status = 500
            await post(app, "k")
            orders.status = 201
            self.assertEqual((await post(app, "k"))[0], 500)

        self.run_async(go5())
        self.assertEqual(orders.runs, 1)

    def test_exception_releases_and_reraises(self) -> None:
        app, orders, _ = self.make()
        orders.fail = RuntimeError("handler bug")
        with self.assertRaisesRegex(RuntimeError, "handler bug"):
            self.run_async(post(app, "k"))
        self.assertEqual(self.records(), 0)
        orders.fail = None
        self.assertEqual(self.run_async(post(app, "k"))[0], 201)
        self.assertEqual(orders.runs, 2)

    def test_database_down(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        r = rcv.Receiver(f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=5")
        orders = Orders()
        a = self.run_async(post(r.wrap(orders), "k"))
        self.assertProblem(a, 503, "unavailable")
        self.assertEqual(a[1]["retry-after"], "1")
        self.assertEqual(orders.runs, 0)

    def test_recovery_takeover(self) -> None:
        # rerun_abandoned: a record past its deadline (its process presumed
        # dead) is taken over and the app run again.
        app, orders, r = self.make(rerun_abandoned=True)

        async def go() -> None:
            orders.gate, orders.entered = asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(post(app, "k"))
            await orders.entered.wait()
            self.assertProblem(await post(app, "k"), 409, "in-flight")
            self.sql("UPDATE RECORDS SET locked_until = now() - interval '1 second'")
            gate, orders.gate = orders.gate, None
            second = await post(app, "k")
            self.assertEqual((second[0], json.loads(second[2])["run"]), (201, 2))
            # Release the first: its late completion is fenced off.
            gate.set()
            await first
            a = await post(app, "k")
            self.assertEqual((a[1]["idempotency-replay"], json.loads(a[2])["run"]), ("true", 2))

        with self.assertLogs("drainer_client.receiver", "WARNING") as logs:
            self.run_async(go())
        self.assertEqual(r.abandoned_total, {"outcome_unknown": 0, "rerun": 1})
        self.assertIn("key='k'", "\n".join(logs.output))

    def test_outcome_unknown_resolved_by_late_answer(self) -> None:
        # Without rerun_abandoned a record past its deadline is never run
        # again: retries get 409 outcome-unknown. Its app was in fact alive
        # but cut off from the database (it holds the only connection of the
        # receiver's pool, so the deadline cannot move and lapses): its late
        # answer is still stored and resolves the record.
        pool = rcv._Pool(support.DATABASE_URL, 1)
        cut_off = rcv.Receiver(pool, schema=self.schema, recovery_timeout=1)
        cut_off.migrate()
        self.receivers.append(cut_off)
        held = asyncio.Event()
        release: Optional[asyncio.Event] = None

        async def first_app(scope: Any, receive: Any, send: Any) -> None:
            assert release is not None
            async with pool.connection():
                held.set()
                await release.wait()
            await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"late"})

        app, orders, r = self.make()  # another replica, with its own connections

        async def go() -> None:
            nonlocal release
            release = asyncio.Event()
            first = asyncio.create_task(post(cut_off.wrap(first_app), "k"))
            await held.wait()
            for _ in range(2400):
                if self.count(f'SELECT count(*) FROM "{self.schema}".records WHERE locked_until < now()') == 1:
                    break
                await asyncio.sleep(0.05)
            else:
                self.fail("the cut-off app's deadline never lapsed")
            with self.assertLogs("drainer_client.receiver", "ERROR") as logs:
                for _ in range(2):
                    a = await post(app, "k")
                    self.assertProblem(a, 409, "outcome-unknown")
                    self.assertEqual(a[1]["idempotency-conflict"], "outcome-unknown")
                    self.assertEqual(json.loads(a[2])["idempotency_key"], "k")
            self.assertEqual(len(logs.output), 1, logs.output)
            self.assertIn("key='k'", logs.output[0])
            self.assertProblem(await post(app, "k", b'{"other":1}'), 409, "payload-mismatch")
            release.set()
            self.assertEqual((await first)[0], 201)
            a = await post(app, "k")
            self.assertEqual((a[0], a[1]["idempotency-replay"], a[2]), (200, "true", b"late"))

        self.run_async(go())
        self.assertEqual(orders.runs, 0)
        self.assertEqual(r.abandoned_total, {"outcome_unknown": 1, "rerun": 0})
        self.assertIn('drainer_receiver_abandoned_total{outcome="outcome_unknown"} 1\n', r.metrics())

    def test_long_handler_kept_alive(self) -> None:
        app, orders, _ = self.make(recovery_timeout=3)

        async def go() -> None:
            orders.gate, orders.entered = asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(post(app, "k"))
            await orders.entered.wait()
            with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
                deadline = c.execute(f'SELECT locked_until FROM "{self.schema}".records').fetchone()[0]  # type: ignore[index]
                for _ in range(1200):  # wait (generously) until the database clock passed the first deadline
                    if c.execute("SELECT now() > %s", [deadline]).fetchone()[0]:  # type: ignore[index]
                        break
                    await asyncio.sleep(0.1)
                else:
                    self.fail("the database clock never passed the first deadline")
            self.assertProblem(await post(app, "k"), 409, "in-flight")
            orders.gate.set()
            self.assertEqual((await first)[0], 201)
            a = await post(app, "k")
            self.assertEqual((a[0], a[1]["idempotency-replay"]), (200, "true"))

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_hung_extension_does_not_hold_the_answer(self) -> None:
        # An extension of the record's deadline that the database does not
        # answer (a lock held by another transaction stands in for a
        # connection that died without a word) is given up within its
        # bound once the app returned; the answer is then stored as usual.
        app, orders, _ = self.make(recovery_timeout=3)
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                   "AND wait_event_type = 'Lock' AND query LIKE '%%SET locked_until = now()%%'")

        async def wait_until(c: Any, what: str, want: Any) -> None:
            for _ in range(1200):  # a minute or two: a bound for a loaded machine
                if want(c.execute(waiting).fetchone()[0]):
                    return
                await asyncio.sleep(0.1)
            self.fail(what)

        async def go() -> None:
            orders.gate, orders.entered = asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(post(app, "k"))
            await orders.entered.wait()
            with psycopg.connect(support.DATABASE_URL, autocommit=True) as watch, \
                    psycopg.connect(support.DATABASE_URL) as locker:
                locker.execute(f'SELECT 1 FROM "{self.schema}".records WHERE key = %s FOR UPDATE', ["k"])
                await wait_until(watch, "no extension waited on the record's lock", lambda n: n > 0)
                orders.gate.set()
                await wait_until(watch, "the waiting extension was not given up after the app returned", lambda n: n == 0)
                locker.rollback()
            self.assertEqual((await first)[0], 201)
            a = await post(app, "k")
            self.assertEqual((a[0], a[1]["idempotency-replay"]), (200, "true"))

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_expiry_by_database_clock(self) -> None:
        app, orders, _ = self.make(ttl=3600)

        async def go() -> None:
            self.assertEqual((await post(app, "k", b'{"a":1}'))[0], 201)
            self.assertEqual(self.records("expires_at - created_at = interval '1 hour'"), 1)
            self.assertEqual((await post(app, "k", b'{"a":1}'))[0], 200)
            self.sql("UPDATE RECORDS SET created_at = now() + interval '1 year', expires_at = now() + interval '1 year'")
            self.assertEqual((await post(app, "k", b'{"a":1}'))[0], 200)
            self.sql("UPDATE RECORDS SET expires_at = now() - interval '1 microsecond'")
            a = await post(app, "k", b'{"a":2}')
            self.assertEqual((a[0], a[1]["idempotency-replay"]), (201, "false"))

        self.run_async(go())
        self.assertEqual(orders.runs, 2)

    def test_expired_while_in_flight(self) -> None:
        # A record whose TTL passes while its first request is still running
        # (its recovery deadline still ahead) is not a new first request: a
        # retry answers in-flight (another request payload-mismatch) as
        # before the expiry, and the app runs once. The first app is held
        # until the retries have been answered, and the test waits for the
        # database clock to see the record expired: nothing depends on timing.
        app, orders, _ = self.make(ttl=0.05, recovery_timeout=3600)

        async def go() -> None:
            orders.gate, orders.entered = asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(post(app, "k"))
            await orders.entered.wait()
            gate, orders.gate = orders.gate, None  # a second run (the defect) is not held
            try:
                for _ in range(500):
                    self.assertEqual(self.records("locked_until > now()"), 1, "the recovery deadline passed")
                    if self.records("expires_at <= now()") == 1:
                        break
                    await asyncio.sleep(0.02)
                else:
                    self.fail("the record did not expire")
                self.assertProblem(await post(app, "k"), 409, "in-flight")
                self.assertProblem(await post(app, "k", b'{"other":1}'), 409, "payload-mismatch")
                # Decided by the plain read, without the row lock: while
                # another transaction holds it, the answers are the same.
                with psycopg.connect(support.DATABASE_URL) as locker:
                    locker.execute(f'SELECT 1 FROM "{self.schema}".records WHERE key = %s FOR UPDATE', ["k"])
                    self.assertProblem(await post(app, "k", b'{"other":1}'), 409, "payload-mismatch")
                    self.assertProblem(await post(app, "k"), 409, "in-flight")
                    locker.rollback()
                self.assertEqual(orders.runs, 1)
            finally:
                gate.set()
            a = await first
            self.assertEqual((a[0], json.loads(a[2])["run"]), (201, 1))
            self.assertEqual(self.records("state = 'completed' AND status = 201"), 1)

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_expired_terminal_records_run_again(self) -> None:
        # An expired record is a new first request when it is completed,
        # marked outcome_unknown, or in flight past its recovery deadline
        # (its process stopped): the TTL ends what the key held.
        app, orders, _ = self.make()

        async def go() -> None:
            for i, state in enumerate(("completed", "outcome_unknown", "in_flight")):
                self.sql("INSERT INTO RECORDS (scope, key, fingerprint, state, locked_until, status, headers, body, "
                         f"expires_at) VALUES ('', '{state}', '\\x00', '{state}', now() - interval '1 second', 201, "
                         "'{}', '', now() - interval '1 second')")
                a = await post(app, state)
                self.assertEqual((a[0], a[1]["idempotency-replay"]), (201, "false"), state)
                self.assertEqual(orders.runs, i + 1, state)

        self.run_async(go())

    def test_scopes(self) -> None:
        r = rcv.Receiver(support.DATABASE_URL, schema=self.schema,
                         scope=lambda s: dict(s["headers"]).get(b"x-account", b"").decode())
        r.migrate()
        self.receivers.append(r)
        orders = Orders()
        app = r.wrap(orders)

        async def go() -> None:
            self.assertEqual((await post(app, "k", b'{"a":1}', extra=[("x-account", "a1")]))[0], 201)
            self.assertEqual((await post(app, "k", b'{"a":2}', extra=[("x-account", "a2")]))[0], 201)
            self.assertEqual((await post(app, "k", b'{"a":1}', extra=[("x-account", "a1")]))[0], 200)
            self.assertProblem(await post(app, "k", b'{"a":1}', extra=[("x-account", "a2")]), 409, "payload-mismatch")

        self.run_async(go())
        self.assertEqual(orders.runs, 2)
        self.assertEqual(self.records(), 2)

    def test_concurrent_same_key(self) -> None:
        for in_tx in (False, True):
            with self.subTest(in_transaction=in_tx):
                app, orders, _ = self.make(in_transaction=in_tx, pool_size=20)
                key = unique("same")

                async def slow(scope: Any) -> None:
                    await asyncio.sleep(0.02)

                orders.effect = slow

                async def go() -> List[int]:
                    answers = await asyncio.gather(*(post(app, key, b'{"a":1}') for _ in range(50)))
                    return [a[0] for a in answers]

                codes = self.run_async(go())
                self.assertEqual(orders.runs, 1, codes)
                self.assertEqual(codes.count(201), 1, codes)
                self.assertEqual(len([c for c in codes if c in (200, 201, 409)]), 50, codes)
                # Once completed, concurrent retries all get the replay.
                self.assertEqual(self.run_async(go()), [200] * 50)
                self.assertEqual(orders.runs, 1)

    def test_in_transaction(self) -> None:
        table = unique("py_effects")
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("CREATE TABLE {} (k text)").format(sql.Identifier(table)))
        self.addCleanup(lambda: psycopg.connect(support.DATABASE_URL, autocommit=True).execute(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(table))).connection.close())
        app, orders, _ = self.make(in_transaction=True)

        async def effect(scope: Any) -> None:
            conn = rcv.current_connection(scope)
            assert conn is not None
            await conn.execute(sql.SQL("INSERT INTO {} VALUES ('x')").format(sql.Identifier(table)))

        orders.effect = effect
        effects = lambda: self.count(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))  # noqa: E731

        orders.status = 500
        self.assertEqual(self.run_async(post(app, "k"))[0], 500)
        orders.fail = RuntimeError("after the effect")
        with self.assertRaises(RuntimeError):
            self.run_async(post(app, "k"))
        self.assertEqual((effects(), self.records()), (0, 0))
        orders.fail, orders.status = None, 201
        self.assertEqual(self.run_async(post(app, "k"))[0], 201)
        self.assertEqual(self.run_async(post(app, "k"))[0], 200)
        self.assertEqual((effects(), self.records(), orders.runs), (1, 1, 3))

    def test_prune(self) -> None:
        _, _, r = self.make()
        self.sql("INSERT INTO RECORDS (scope, key, fingerprint, state, status, headers, body, expires_at) "
                 "SELECT '', 'old' || i, '\\x00', 'completed', 201, '{}', '', now() - interval '1 second' "
                 "FROM generate_series(1, 2500) i")
        self.sql("INSERT INTO RECORDS (scope, key, fingerprint, state, locked_until, expires_at) "
                 "SELECT '', 'live' || i, '\\x00', 'in_flight', now() + interval '1 minute', now() + interval '1 hour' "
                 "FROM generate_series(1, 10) i")
        self.assertEqual(self.run_async(r.prune()), 2500)
        self.assertEqual(self.records(), 10)

    def test_migrate_concurrently(self) -> None:
        errors: List[BaseException] = []

        def m() -> None:
            try:
                rcv.Receiver(support.DATABASE_URL, schema=self.schema).migrate()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=m) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(self.records(), 0)

    def test_migrate_does_not_wait_for_running_requests(self) -> None:
        # migrate on an up-to-date store (a replica starting up beside running
        # ones) takes no lock on the records table: it returns while a
        # request's transaction (in_transaction, its record claimed) holds the
        # table's RowExclusiveLock, rather than queueing behind it and, with
        # it, every request that comes after.
        _, _, r = self.make()
        holder = self.connect()
        holder.execute(sql.SQL("INSERT INTO {}.records (scope, key, fingerprint, state, locked_until, expires_at) "
                               "VALUES ('', 'running', '\\x00', 'in_flight', now() + interval '1 minute', "
                               "now() + interval '1 hour')").format(sql.Identifier(self.schema)))
        outcome: List[Any] = []

        def m() -> None:
            try:
                r.migrate()
                outcome.append("returned")
            except BaseException as e:  # noqa: BLE001
                outcome.append(e)

        t = threading.Thread(target=m)
        t.start()
        # Generous: an up-to-date migrate takes milliseconds; one that waits
        # for the holder waits until the holder commits, after this bound.
        t.join(30)
        waited = t.is_alive()
        try:
            self.assertFalse(waited, "migrate() still waiting 30 s for a transaction holding the records table")
            self.assertEqual(outcome, ["returned"])

            async def amigrate() -> None:
                await asyncio.wait_for(r.amigrate(), 30)

            self.run_async(amigrate())
        finally:
            holder.commit()
            t.join()
        self.assertEqual(self.records(), 1)
        # A store missing a part is still completed.
        self.sql(f'DROP INDEX "{self.schema}".records_expires_idx')
        r.migrate()
        self.assertEqual(self.count("SELECT count(*) FROM pg_class WHERE oid = to_regclass(%s)",
                                    f'"{self.schema}".records_expires_idx'), 1)


class HangUpTest(ReceiverTestCase):
    """A client that hangs up after the key was claimed cancels nothing: the
    app goes on (it is told, by http.disconnect, and not cancelled), its
    effect and answer are committed once, and a retry gets the replay. The
    server's send raises OSError once the client is gone, as the ASGI spec
    lets a server do; the answer is stored and not sent."""

    def _effects_table(self) -> str:
        table = unique("py_effects")
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("CREATE TABLE {} (k text PRIMARY KEY)").format(sql.Identifier(table)))
        self.addCleanup(lambda: psycopg.connect(support.DATABASE_URL, autocommit=True).execute(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(table))).connection.close())
        return table

    def test_client_hangs_up_mid_handler(self) -> None:
        for in_transaction in (True, False):
            with self.subTest(in_transaction=in_transaction):
                self.schema = unique("py_recv")
                self.addCleanup(self._drop)
                table = self._effects_table()
                r = rcv.Receiver(support.DATABASE_URL, schema=self.schema, in_transaction=in_transaction)
                r.migrate()
                self.receivers.append(r)
                runs = 0

                async def app(scope: Any, receive: Any, send: Any) -> None:
                    nonlocal runs
                    runs += 1
                    while (await receive()).get("more_body"):
                        pass
                    if runs == 1:
                        # A handler slower than its caller: it hears the client go, and goes on.
                        self.assertEqual((await receive())["type"], "http.disconnect")
                    insert = sql.SQL("INSERT INTO {} VALUES ('order-1')").format(sql.Identifier(table))
                    conn = rcv.current_connection(scope)
                    if in_transaction:
                        assert conn is not None, "the app's connection is gone"
                        await conn.execute(insert)
                    else:
                        async with await psycopg.AsyncConnection.connect(support.DATABASE_URL, autocommit=True) as c:
                            await c.execute(insert)
                    await send({"type": "http.response.start", "status": 201,
                                "headers": [(b"content-type", b"application/json")]})
                    await send({"type": "http.response.body", "body": b'{"order":1}'})

                wrapped = r.wrap(app)

                async def hang_up() -> None:
                    pending = [{"type": "http.request", "body": b"{}", "more_body": False}]

                    async def receive() -> Dict[str, Any]:
                        if pending:
                            return pending.pop(0)
                        await asyncio.sleep(0.05)  # the caller's timeout
                        return {"type": "http.disconnect"}

                    async def send(msg: Dict[str, Any]) -> None:
                        raise ConnectionResetError("the client is gone")

                    scope = {"type": "http", "method": "POST", "path": "/v1/orders", "raw_path": b"/v1/orders",
                             "query_string": b"", "headers": [(b"content-type", b"application/json"),
                                                              (b"idempotency-key", b"k")]}
                    await wrapped(scope, receive, send)

                self.run_async(hang_up())
                status, headers, body = self.run_async(post(wrapped, "k"))
                self.assertEqual((status, headers.get("idempotency-replay"), body), (200, "true", b'{"order":1}'))
                effects = self.count(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
                self.assertEqual((runs, effects, self.records("state = 'completed'")), (1, 1, 1))

    def test_idle_in_transaction_timeout(self) -> None:
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            row = c.execute("SELECT current_setting('idle_in_transaction_session_timeout')").fetchone()
            assert row is not None
            server = row[0]
        for opt, want in ((None, "1min"), (1.5, "1500ms"), (-1, server)):
            with self.subTest(opt=opt):
                kw = {} if opt is None else {"idle_in_transaction_timeout": opt}
                app, orders, _ = self.make(in_transaction=True, **kw)
                seen: List[str] = []

                async def effect(scope: Any) -> None:
                    conn = rcv.current_connection(scope)
                    assert conn is not None
                    cur = await conn.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
                    seen.append((await cur.fetchone())[0])

                orders.effect = effect
                self.assertEqual(self.run_async(post(app, unique("k")))[0], 201)
                self.assertEqual(seen, [want])
        for bad in (0, 0.0001, float("nan"), 2 ** 31 / 1000):
            with self.assertRaises(ValueError, msg=repr(bad)) as cm:
                rcv.Receiver("postgresql://x", idle_in_transaction_timeout=bad)
            self.assertIn("idle_in_transaction_timeout", str(cm.exception))

class FailureTest(ReceiverTestCase):
    """The answers that name their cause, as the Go receiver's
    (receiver/failures_test.go): an exhausted pool, a serialization
    failure, a key of an unknown version."""

    def test_unsupported_key_version(self) -> None:
        # A key of a version this receiver does not know (only v1 exists),
        # sent with a tuple header, is answered 400 naming the version, not
        # as a key that differs from its tuple.
        app, orders, _ = self.make()
        t = ("run-1", "s1", "charge", "")
        key = "idem_v2_" + dc.idempotency_key(*t)[len("idem_v1_"):]
        enc = base64.urlsafe_b64encode(dc.canonical_tuple(*t).encode()).rstrip(b"=").decode()

        async def go() -> None:
            a = await post(app, key, extra=[("x-agent-idempotency-tuple", enc)])
            self.assertProblem(a, 400, "unsupported-key-version")
            detail = json.loads(a[2])["detail"]
            self.assertTrue("v2" in detail and "idem_v1_" in detail, detail)
            self.assertEqual(self.records(), 0)
            # Without a tuple header the key is an opaque key like any other.
            self.assertEqual((await post(app, key))[0], 201)

        self.run_async(go())
        self.assertEqual(orders.runs, 1)

    def test_pool_exhausted(self) -> None:
        # With in_transaction each keyed request holds a connection for its
        # whole app: when none comes free within the pool's timeout, the 503
        # says the pool was exhausted, not that the store could not be
        # reached. The pool has one connection, held by a running app; its
        # timeout (30 s) is made to lapse sooner.
        app, orders, r = self.make(in_transaction=True, pool_size=1)
        r._pool.timeout = 0.5

        async def go() -> Answer:
            orders.gate, orders.entered = asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(post(app, "k1"))
            await orders.entered.wait()
            try:
                a = await asyncio.wait_for(post(app, "k2"), 30)
            finally:
                orders.gate.set()
            self.assertEqual((await first)[0], 201)
            # Once the connection is free again the retry goes through.
            self.assertEqual((await post(app, "k2"))[0], 201)
            return a

        a = self.run_async(go())
        self.assertProblem(a, 503, "pool-exhausted")
        self.assertEqual(a[1]["retry-after"], "1")
        detail = json.loads(a[2])["detail"]
        self.assertTrue("all 1 were in use" in detail and "pool_size" in detail, detail)
        self.assertEqual((orders.runs, self.records()), (2, 2))

    def test_serialization_failure(self) -> None:
        # Under SERIALIZABLE, a request's transaction that the database
        # aborts with a serialization failure (40001) is answered 503 naming
        # it, with Retry-After, not blaming the store. The app reads skew_b
        # and writes skew_a; meanwhile another transaction reads skew_a,
        # writes skew_b and commits first (write skew), so the request's
        # transaction cannot commit.
        conninfo = psycopg.conninfo.make_conninfo(support.DATABASE_URL,
                                                  options="-c default_transaction_isolation=serializable")
        r = rcv.Receiver(conninfo, schema=self.schema, in_transaction=True)
        r.migrate()
        self.receivers.append(r)
        skew_a, skew_b = (sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(t))
                          for t in ("skew_a", "skew_b"))
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("CREATE TABLE {} (x int); CREATE TABLE {} (x int)").format(skew_a, skew_b))
        runs = 0
        ev: Dict[str, asyncio.Event] = {}  # "inside" and "gate", made in the loop

        async def orders(scope: Any, receive: Any, send: Any) -> None:
            nonlocal runs
            runs += 1
            conn = rcv.current_connection(scope)
            assert conn is not None
            await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(skew_b))
            await conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(skew_a))
            ev["inside"].set()
            await ev["gate"].wait()
            await send({"type": "http.response.start", "status": 201, "headers": []})
            await send({"type": "http.response.body", "body": b"made"})

        app = r.wrap(orders)

        async def go() -> Answer:
            ev["inside"], ev["gate"] = asyncio.Event(), asyncio.Event()
            answer = asyncio.create_task(post(app, "k"))
            waiting = asyncio.create_task(ev["inside"].wait())
            await asyncio.wait([answer, waiting], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if answer.done():
                self.fail(f"the app did not get to wait: {answer.result()}")
            try:
                async with await psycopg.AsyncConnection.connect(conninfo) as other:
                    await other.execute(sql.SQL("SELECT count(*) FROM {}").format(skew_a))
                    await other.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(skew_b))
                    await other.commit()
            finally:
                ev["gate"].set()
            a = await answer
            # Retried with the same key, it runs again and commits.
            self.assertEqual((await post(app, "k"))[0], 201)
            return a

        a = self.run_async(go())
        self.assertProblem(a, 503, "serialization-failure")
        self.assertEqual(a[1]["retry-after"], "1")
        detail = json.loads(a[2])["detail"]
        self.assertTrue("40001" in detail and "nothing was committed" in detail, detail)
        self.assertEqual(runs, 2)
        self.assertEqual((self.records(), self.count(sql.SQL("SELECT count(*) FROM {}").format(skew_a))), (1, 1))


class MigrateUpgradeTest(ReceiverTestCase):
    def test_upgrades_a_store_of_an_earlier_version(self) -> None:
        # A store whose state check allowed only in_flight and completed is
        # upgraded in place, its records kept; migrating again changes nothing.
        self.sql(f'''CREATE SCHEMA "{self.schema}";
CREATE TABLE RECORDS (
    scope text NOT NULL, key text NOT NULL, fingerprint bytea NOT NULL, state text NOT NULL,
    locked_until timestamptz, status integer, headers jsonb, body bytea,
    created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz, expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key), CHECK (state IN ('in_flight', 'completed')));
CREATE INDEX records_expires_idx ON RECORDS (expires_at)''')
        fp = rcv.fingerprint("POST", "/v1/orders", "application/json", b"{}")
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("INSERT INTO {}.records (scope, key, fingerprint, state, status, headers, body, "
                              "completed_at, expires_at) VALUES ('', 'old', %s, 'completed', 201, '{{}}', 'stored before', "
                              "now(), now() + interval '1 hour'), ('', 'stuck', %s, 'in_flight', NULL, NULL, NULL, NULL, "
                              "now() + interval '1 hour')").format(sql.Identifier(self.schema)), [fp, fp])
        self.sql("UPDATE RECORDS SET locked_until = now() - interval '1 second' WHERE key = 'stuck'")
        r = rcv.Receiver(support.DATABASE_URL, schema=self.schema)
        self.receivers.append(r)
        r.migrate()
        self.run_async(r.amigrate())
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            checks = c.execute("SELECT array_agg(conname::text ORDER BY conname) FROM pg_constraint "
                               "WHERE conrelid = %s::regclass AND contype = 'c'", [f'"{self.schema}".records']).fetchone()
        self.assertEqual(checks, (["records_state"],))
        orders = Orders()
        app = r.wrap(orders)

        async def go() -> None:
            a = await post(app, "old")
            self.assertEqual((a[0], a[2]), (200, b"stored before"))
            with self.assertLogs("drainer_client.receiver", "ERROR"):
                self.assertProblem(await post(app, "stuck"), 409, "outcome-unknown")

        self.run_async(go())
        self.assertEqual(orders.runs, 0)
        self.assertEqual(self.records("key = 'stuck' AND state = 'outcome_unknown'"), 1)


class CrashTest(ReceiverTestCase):
    """The first request runs in a child process (receiver_crash_child.py)
    that writes its effect and is killed with SIGKILL mid-request."""

    def setUp(self) -> None:
        super().setUp()
        self.effects = unique("py_crash_effects")
        with psycopg.connect(support.DATABASE_URL, autocommit=True) as c:
            c.execute(sql.SQL("CREATE TABLE {} (key text NOT NULL)").format(sql.Identifier(self.effects)))
        self.addCleanup(self.sql, f'DROP TABLE "{self.effects}"')

    def effect_count(self) -> int:
        return self.count(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(self.effects)))

    def wait_for(self, what: str, query: str, *params: Any) -> None:
        """Poll a count until it is 1, for at most two minutes."""
        deadline = time.monotonic() + 120
        while self.count(query, *params) != 1:
            if time.monotonic() > deadline:
                self.fail(f"waited 2 minutes for {what}")
            time.sleep(0.05)

    def kill_child_mid_request(self, key: str, in_tx: bool, recovery: float) -> None:
        """Run the first request with key in a child process, SIGKILL it once
        its app wrote the effect, and return once the database dropped the
        child's connections."""
        app_name = unique("py_crash_child")
        conninfo = psycopg.conninfo.make_conninfo(support.DATABASE_URL, application_name=app_name)
        child = subprocess.Popen(
            [sys.executable, str(CRASH_CHILD), conninfo, self.schema, self.effects, key, "1" if in_tx else "0",
             str(recovery)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out = b""
            deadline = time.monotonic() + 120
            while b"effect written\n" not in out:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.fail("the crash child wrote no effect within 2 minutes")
                ready, _, _ = select.select([child.stdout], [], [], left)
                chunk = os.read(child.stdout.fileno(), 4096) if ready else b""  # type: ignore[union-attr]
                if ready and not chunk:
                    self.fail(f"the crash child exited before writing its effect: {child.stderr.read()!r}")  # type: ignore[union-attr]
                out += chunk
        finally:
            child.kill()  # SIGKILL: nothing of the receiver runs after the effect
            child.communicate(timeout=60)
        self.wait_for("the killed child's connections to end",
                      "SELECT (count(*) = 0)::int FROM pg_stat_activity WHERE application_name = %s", app_name)

    def test_outside_transaction_outcome_unknown(self) -> None:
        # The effect exists; after the recovery timeout a retry gets 409
        # outcome-unknown naming the key, the app does not run, the record
        # is reported once (ERROR line, counter) and kept.
        app, orders, r = self.make()
        self.kill_child_mid_request("charge-7f3a", False, 1)
        self.wait_for("the record's deadline to pass",
                      f'SELECT count(*)::int FROM "{self.schema}".records WHERE locked_until < now()')

        async def go() -> None:
            for _ in range(3):
                a = await post(app, "charge-7f3a", b'{"amount":5}', path="/v1/charges")
                self.assertProblem(a, 409, "outcome-unknown")
                self.assertEqual(a[1]["idempotency-conflict"], "outcome-unknown")
                self.assertEqual(json.loads(a[2])["idempotency_key"], "charge-7f3a")

        with self.assertLogs("drainer_client.receiver", "ERROR") as logs:
            self.run_async(go())
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("scope='' key='charge-7f3a'", logs.output[0])
        self.assertEqual((orders.runs, self.effect_count()), (0, 1))
        self.assertEqual(r.abandoned_total, {"outcome_unknown": 1, "rerun": 0})
        self.assertIn('drainer_receiver_abandoned_total{outcome="outcome_unknown"} 1\n', r.metrics())
        self.assertEqual(self.records("state = 'outcome_unknown'"), 1)

    def test_outside_transaction_rerun_abandoned(self) -> None:
        # rerun_abandoned: the app is declared safe to run twice, so the
        # retry runs it again; the rerun is reported too.
        app, orders, r = self.make(rerun_abandoned=True)
        self.kill_child_mid_request("charge-9c41", False, 1)
        self.wait_for("the record's deadline to pass",
                      f'SELECT count(*)::int FROM "{self.schema}".records WHERE locked_until < now()')

        async def go() -> Tuple[int, int]:
            first = await post(app, "charge-9c41", b'{"amount":5}', path="/v1/charges")
            again = await post(app, "charge-9c41", b'{"amount":5}', path="/v1/charges")
            return first[0], again[0]

        with self.assertLogs("drainer_client.receiver", "WARNING") as logs:
            self.assertEqual(self.run_async(go()), (201, 200))
        self.assertIn("key='charge-9c41'", "\n".join(logs.output))
        self.assertEqual(orders.runs, 1)
        self.assertEqual(r.abandoned_total, {"outcome_unknown": 0, "rerun": 1})

    def test_in_transaction_rolls_back_with_the_effect(self) -> None:
        # The record is written in the app's transaction: the kill rolls
        # back record and effect together, and a retry runs the app at once
        # (no recovery timeout to wait out): one effect.
        app, orders, r = self.make(in_transaction=True)
        self.kill_child_mid_request("charge-2b08", True, 600)
        self.assertEqual((self.effect_count(), self.records()), (0, 0))
        table = sql.Identifier(self.effects)

        async def effect(scope: Any) -> None:
            conn = rcv.current_connection(scope)
            assert conn is not None
            await conn.execute(sql.SQL("INSERT INTO {} (key) VALUES ('charge-2b08')").format(table))

        orders.effect = effect

        async def go() -> Tuple[int, int]:
            first = await post(app, "charge-2b08", b'{"amount":5}', path="/v1/charges")
            again = await post(app, "charge-2b08", b'{"amount":5}', path="/v1/charges")
            return first[0], again[0]

        self.assertEqual(self.run_async(go()), (201, 200))
        self.assertEqual((orders.runs, self.effect_count(), self.records()), (1, 1, 1))
        self.assertEqual(r.abandoned_total, {"outcome_unknown": 0, "rerun": 0})


class HTTPServerTest(ReceiverTestCase):
    """The example service over real HTTP/1.1 connections."""

    def test_example_server(self) -> None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("receiver_example_server", EXAMPLE / "server.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.ensure_tables(support.DATABASE_URL)
        app, r = mod.build_app(support.DATABASE_URL, schema=self.schema)
        r.migrate()

        urls: List[str] = []
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            task = loop.create_task(mod.serve(app, "127.0.0.1", 0, lambda u: (urls.append(u), ready.set())))
            try:
                loop.run_until_complete(task)
            except asyncio.CancelledError:
                pass

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        self.assertTrue(ready.wait(30), "the example server did not start")

        def stop() -> None:
            asyncio.run_coroutine_threadsafe(r.aclose(), loop).result(30)
            for task in asyncio.all_tasks(loop):
                loop.call_soon_threadsafe(task.cancel)
            t.join(30)
            loop.close()

        self.addCleanup(stop)
        base = urls[0]
        key = unique("order")

        def send(body: bytes, chunked: bool = False) -> Tuple[int, Dict[str, str], bytes]:
            data: Any = body
            if chunked:
                data = iter([body[:3], body[3:]])
            req = urllib.request.Request(base + "/v1/orders", data=data, method="POST",
                                         headers={"Idempotency-Key": key, "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
            except urllib.error.HTTPError as e:
                return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

        c1, h1, b1 = send(b'{"sku":"A","qty":1}')
        c2, h2, b2 = send(b'{"qty": 1, "sku": "A"}', chunked=True)
        c3, h3, _ = send(b'{"sku":"B","qty":1}')
        self.assertEqual((c1, h1["idempotency-replay"]), (201, "false"))
        self.assertEqual((c2, h2["idempotency-replay"], b2), (200, "true", b1))
        self.assertEqual((c3, h3["idempotency-conflict"]), (409, "payload-mismatch"))


if __name__ == "__main__":
    unittest.main()
