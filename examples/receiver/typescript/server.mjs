// An orders service behind @drainer/client/receiver (docs/receiver.md),
// with Node's own http server. Endpoints as the Go example's
// (examples/receiver/go): POST /v1/orders (key required; X-Account is the
// key scope) answers 201 with {"id": N, "order": BODY}; GET /v1/orders/count
// answers {"count": N}; GET /metrics serves drainer_receiver_abandoned_total.
// The order is inserted through currentClient(req), in the transaction that
// writes the receiver's record (inTransaction), unless
// --outside-transaction; --delay holds each order that long after writing
// it, before answering.
//
//   (cd sdk/typescript && npm ci)    # pg; the library's dist/ is committed
//   DATABASE_URL=postgres://... node examples/receiver/typescript/server.mjs \
//       [--addr 127.0.0.1:8080] [--mode seed|ietf] [--schema drainer_receiver] [--delay 0s] \
//       [--outside-transaction] [--rerun-abandoned] [--recovery-timeout 60s]
//
// --addr defaults to $ADDR, else 127.0.0.1:$PORT, else 127.0.0.1:8080; port
// 0 picks a free port. Once listening it prints "listening on http://HOST:PORT".
//
// This file loads the library from this repository's sdk/typescript; in
// your own project: import { createReceiver } from '@drainer/client/receiver'.

import http from 'node:http';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';

const sdk = new URL('../../../sdk/typescript/', import.meta.url);
const require = createRequire(new URL('package.json', sdk));
const pg = require('pg');
const { createReceiver, currentClient } = await import(new URL('dist/receiver.js', sdk).href);

const { values: args } = parseArgs({
  options: {
    addr: { type: 'string', default: process.env.ADDR || `127.0.0.1:${process.env.PORT || '8080'}` },
    mode: { type: 'string', default: 'seed' },
    schema: { type: 'string', default: 'drainer_receiver' },
    delay: { type: 'string', default: '0s' },
    'in-transaction': { type: 'boolean', default: false }, // the default; kept for symmetry with the other examples
    'outside-transaction': { type: 'boolean', default: false },
    'rerun-abandoned': { type: 'boolean', default: false },
    'recovery-timeout': { type: 'string', default: '60s' },
  },
});
const url = process.env.DATABASE_URL;
if (!url) {
  console.error('receiver-example: set DATABASE_URL to a postgres:// URL');
  process.exit(2);
}
if (args['in-transaction'] && args['outside-transaction']) {
  console.error('receiver-example: --in-transaction and --outside-transaction contradict each other');
  process.exit(2);
}
// A duration as the Go example's flags take it: 500ms, 2s, 1.5s (or bare seconds).
function durationMs(flag) {
  const m = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(args[flag].trim());
  if (!m) {
    console.error(`receiver-example: --${flag} ${JSON.stringify(args[flag])} is not a duration such as 500ms or 2s`);
    process.exit(2);
  }
  return Number(m[1]) * (m[2] === 'ms' ? 1 : 1000);
}
const delayMs = durationMs('delay');

const pool = new pg.Pool({ connectionString: url });
// The order is written through currentClient(req), in the transaction that
// writes the receiver's record: a crash mid-request rolls back both, and the
// retry makes the order once.
const receiver = createReceiver(pool, {
  schema: args.schema,
  mode: args.mode,
  scope: (req) => String(req.headers['x-account'] ?? ''),
  inTransaction: !args['outside-transaction'],
  rerunAbandoned: args['rerun-abandoned'],
  recoveryTimeoutMs: durationMs('recovery-timeout'),
  // A handler that throws: its record is released and the request answered
  // 500 handler-error; the error comes here.
  onError: (err) => console.error('receiver-example: handler failed:', err instanceof Error ? err.message : err),
});
await receiver.migrate();
await pool.query(`CREATE TABLE IF NOT EXISTS example_orders (
  id bigserial PRIMARY KEY, account text NOT NULL, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`);

function answer(res, status, body, headers = {}) {
  const b = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': String(b.length), ...headers });
  res.end(b);
}

async function orders(req, res) {
  const path = (req.url ?? '/').split('?')[0];
  if (req.method === 'GET' && path === '/metrics') {
    const b = Buffer.from(receiver.metrics());
    res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4', 'Content-Length': String(b.length) });
    res.end(b);
    return;
  }
  if (req.method === 'GET' && path === '/v1/orders/count') {
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM example_orders');
    answer(res, 200, { count: rows[0].n });
    return;
  }
  if (req.method !== 'POST' || path !== '/v1/orders') {
    answer(res, 404, { error: 'not found' });
    return;
  }
  const chunks = [];
  for await (const c of req) chunks.push(c);
  let order;
  try {
    order = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    answer(res, 400, { error: 'the body must be JSON' });
    return;
  }
  const db = currentClient(req) ?? pool;
  const { rows } = await db.query('INSERT INTO example_orders (account, body) VALUES ($1, $2) RETURNING id', [
    String(req.headers['x-account'] ?? ''),
    JSON.stringify(order),
  ]);
  const id = Number(rows[0].id);
  if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
  answer(res, 201, { id, order }, { Location: `/v1/orders/${id}` });
}

const server = http.createServer(receiver.wrap(orders));
const i = args.addr.lastIndexOf(':');
server.listen(Number(args.addr.slice(i + 1)), args.addr.slice(0, i) || '127.0.0.1', () => {
  const a = server.address();
  console.log(`listening on http://${a.address}:${a.port}`);
});
setInterval(() => receiver.prune().catch(() => {}), 3600_000).unref();
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => server.close(() => pool.end().then(() => process.exit(0))));
}
