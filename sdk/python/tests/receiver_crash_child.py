"""The first request of test_receiver.CrashTest, run in a process of its own.

Usage: receiver_crash_child.py CONNINFO SCHEMA TABLE KEY IN_TX RECOVERY_TIMEOUT

It wraps an ASGI app in a Receiver (in_transaction when IN_TX is "1") and
sends it one keyed request. The app inserts the request's effect into TABLE
(through current_connection() in a transaction, else on a connection of its
own that commits at once, as a call to another system would), prints
"effect written" and hangs: the test kills the process there with SIGKILL,
so nothing of the receiver runs after the effect.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
from typing import Any, Dict

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from drainer_client import receiver as rcv  # noqa: E402


async def main(conninfo: str, schema: str, table: str, key: str, in_tx: bool, recovery: float) -> None:
    insert = sql.SQL("INSERT INTO {} (key) VALUES (%s)").format(sql.Identifier(table))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        conn = rcv.current_connection(scope)
        if conn is not None:
            await conn.execute(insert, [key])
        else:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as c:
                await c.execute(insert, [key])
        print("effect written", flush=True)
        await asyncio.sleep(3600)  # killed here

    r = rcv.Receiver(conninfo, schema=schema, in_transaction=in_tx, recovery_timeout=recovery)
    headers = [(b"content-type", b"application/json"), (b"idempotency-key", key.encode())]
    scope: Dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/charges", "raw_path": b"/v1/charges",
                             "query_string": b"", "headers": headers}
    body = [{"type": "http.request", "body": b'{"amount":5}', "more_body": False}]

    async def receive() -> Dict[str, Any]:
        if body:
            return body.pop()
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(msg: Dict[str, Any]) -> None:
        pass

    await r.wrap(app)(scope, receive, send)


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], a[4] == "1", float(a[5])))
    sys.exit(2)  # not reached: the test kills the process mid-request
