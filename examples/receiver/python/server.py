"""An orders service behind drainer_client.receiver, served by a minimal
HTTP/1.1 server written with the standard library only (asyncio).

Usage::

    DATABASE_URL=postgres://... PYTHONPATH=sdk/python/src /usr/bin/python3 examples/receiver/python/server.py \\
        [--addr 127.0.0.1:8080] [--mode seed|ietf] [--schema drainer_receiver] [--delay 0s] \\
        [--outside-transaction] [--rerun-abandoned] [--recovery-timeout 60s]

``--addr`` defaults to $ADDR, else 127.0.0.1:$PORT, else 127.0.0.1:8080;
port 0 picks a free port. Once listening it prints
``listening on http://HOST:PORT``. Endpoints as the Go example's
(examples/receiver/go): POST /v1/orders (key required; X-Account is the
key scope) answers 201 with {"id": N, "order": BODY}; GET /v1/orders/count
answers {"count": N}; GET /metrics serves drainer_receiver_abandoned_total.
The order is inserted through ``current_connection(scope)``, in the
transaction that writes the receiver's record (``in_transaction=True``), unless
``--outside-transaction``; ``--delay`` holds each order that long after
writing it, before answering.

Any ASGI server (uvicorn, hypercorn, daphne) serves ``build_app(...)`` the
same way; :func:`serve` exists so the example runs with nothing installed
but psycopg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import pathlib
import re
import sys
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "sdk" / "python" / "src"))

import psycopg  # noqa: E402

from drainer_client.receiver import Receiver, current_connection  # noqa: E402

ASGIApp = Callable[..., Awaitable[None]]

_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found", 409: "Conflict", 413: "Content Too Large",
            422: "Unprocessable Content", 500: "Internal Server Error", 503: "Service Unavailable"}


async def _read_request(reader: asyncio.StreamReader) -> Optional[Tuple[str, str, List[Tuple[bytes, bytes]], List[bytes]]]:
    line = await reader.readline()
    if not line:
        return None
    method, target, _ = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    headers: List[Tuple[bytes, bytes]] = []
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        headers.append((name.strip().lower().encode("latin-1"), value.strip().encode("latin-1")))
    hmap = dict(headers)
    chunks: List[bytes] = []
    if hmap.get(b"transfer-encoding", b"").lower() == b"chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readline()
                break
            chunks.append(await reader.readexactly(size))
            await reader.readline()
    elif b"content-length" in hmap:
        chunks.append(await reader.readexactly(int(hmap[b"content-length"])))
    return method, target, headers, chunks


async def _handle(app: ASGIApp, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        req = await _read_request(reader)
        if req is None:
            return
        method, target, headers, chunks = req
        raw_path, _, query = target.partition("?")
        from urllib.parse import unquote

        scope: Dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": unquote(raw_path), "raw_path": raw_path.encode("latin-1"),
            "query_string": query.encode("latin-1"), "root_path": "", "headers": headers,
            "server": writer.get_extra_info("sockname")[:2], "client": writer.get_extra_info("peername")[:2],
        }
        # The body arrives in the chunks it was sent in, as a real server's would.
        pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
        if not pending:
            pending = [{"type": "http.request", "body": b"", "more_body": False}]
        done = asyncio.Event()

        async def receive() -> Dict[str, Any]:
            if pending:
                return pending.pop(0)
            await done.wait()
            return {"type": "http.disconnect"}

        started: List[Any] = []

        async def send(msg: Dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                started.append(msg)
                status = msg["status"]
                out = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n".encode()
                for k, v in msg.get("headers", []):
                    out += bytes(k) + b": " + bytes(v) + b"\r\n"
                writer.write(out + b"connection: close\r\n\r\n")
            elif msg["type"] == "http.response.body":
                writer.write(bytes(msg.get("body", b"")))
                if not msg.get("more_body", False):
                    await writer.drain()

        try:
            await app(scope, receive, send)
        except Exception:
            if not started:
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        done.set()
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def serve(app: ASGIApp, host: str, port: int, ready: Optional[Callable[[str], None]] = None) -> None:
    """Serve app over HTTP/1.1 (one request per connection) until cancelled."""
    server = await asyncio.start_server(lambda r, w: _handle(app, r, w), host, port)
    h, p = server.sockets[0].getsockname()[:2]
    if ready:
        ready(f"http://{h}:{p}")
    async with server:
        await server.serve_forever()


def build_app(database_url: str, mode: str = "seed", schema: str = "drainer_receiver", delay: float = 0.0,
              in_transaction: bool = True, rerun_abandoned: bool = False,
              recovery_timeout: float = 60.0) -> Tuple[ASGIApp, Receiver]:
    """The orders app behind a receiver; call receiver.migrate() (and
    ensure_tables) before serving."""

    async def orders(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and scope["path"] == "/metrics":
            body = receiver.metrics().encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain; version=0.0.4"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] == "GET" and scope["path"] == "/v1/orders/count":
            async with await psycopg.AsyncConnection.connect(database_url) as conn:
                cur = await conn.execute("SELECT count(*) FROM example_orders")
                n = (await cur.fetchone())[0]  # type: ignore[index]
            await _answer(send, 200, json.dumps({"count": n}).encode())
            return
        if scope["method"] != "POST" or scope["path"] != "/v1/orders":
            await _answer(send, 404, b'{"error":"not found"}')
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        try:
            order = json.loads(body)
        except ValueError:
            await _answer(send, 400, b'{"error":"the body must be JSON"}')
            return
        account = dict(scope["headers"]).get(b"x-account", b"").decode("latin-1")
        conn = current_connection(scope)
        q = "INSERT INTO example_orders (account, body) VALUES (%s, %s) RETURNING id"
        if conn is not None:
            oid = (await (await conn.execute(q, [account, json.dumps(order)])).fetchone())[0]  # type: ignore[index]
        else:
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
                oid = (await (await c.execute(q, [account, json.dumps(order)])).fetchone())[0]  # type: ignore[index]
        if delay:
            await asyncio.sleep(delay)
        out = json.dumps({"id": oid, "order": order}, separators=(",", ":")).encode()
        await _answer(send, 201, out, [(b"location", f"/v1/orders/{oid}".encode())])

    def account_of(scope: Dict[str, Any]) -> str:
        return dict(scope["headers"]).get(b"x-account", b"").decode("latin-1")

    # The order is written through current_connection(scope), in the
    # transaction that writes the receiver's record: a crash mid-request
    # rolls back both, and the retry makes the order once.
    receiver = Receiver(database_url, schema=schema, mode=mode, scope=account_of, in_transaction=in_transaction,
                        rerun_abandoned=rerun_abandoned, recovery_timeout=recovery_timeout)
    return receiver.wrap(orders), receiver


def ensure_tables(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, account text NOT NULL, "
                     "body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")


async def _answer(send: Any, status: int, body: bytes, extra: Optional[List[Tuple[bytes, bytes]]] = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())] + (extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _duration(text: str) -> float:
    """A duration as the Go example's -delay takes it: 500ms, 2s, 1.5s (or bare seconds)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 500ms or 2s")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def main() -> None:
    default_addr = os.environ.get("ADDR") or "127.0.0.1:" + (os.environ.get("PORT") or "8080")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addr", default=default_addr)
    p.add_argument("--mode", default="seed", choices=["seed", "ietf"])
    p.add_argument("--schema", default="drainer_receiver")
    p.add_argument("--delay", type=_duration, default=0.0,
                   help="hold each order this long after writing it, before answering (500ms, 2s)")
    p.add_argument("--in-transaction", action="store_true",
                   help="insert the order in the transaction that writes the receiver's record (the default)")
    p.add_argument("--outside-transaction", action="store_true",
                   help="insert the order on its own connection, outside the receiver's transaction")
    p.add_argument("--rerun-abandoned", action="store_true",
                   help="outside a transaction: run an order again whose process died mid-request")
    p.add_argument("--recovery-timeout", type=_duration, default=60.0,
                   help="how long a dead process's record blocks retries (60s)")
    args = p.parse_args()
    if args.in_transaction and args.outside_transaction:
        p.error("--in-transaction and --outside-transaction contradict each other")
    url = os.environ.get("DATABASE_URL")
    if not url:
        p.error("set DATABASE_URL to a postgres:// URL")
    logging.basicConfig(format="%(levelname)s %(message)s", stream=sys.stderr)
    app, receiver = build_app(url, args.mode, args.schema, args.delay, not args.outside_transaction,
                              args.rerun_abandoned, args.recovery_timeout)
    receiver.migrate()
    ensure_tables(url)
    host, _, port = args.addr.rpartition(":")
    try:
        asyncio.run(serve(app, host or "127.0.0.1", int(port), lambda u: print(f"listening on {u}", flush=True)))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
