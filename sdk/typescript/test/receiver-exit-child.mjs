// The process of the exit test of receiver.test.ts (plain JavaScript on
// the built library, so the test runner does not take it for a test file).
//
//   node receiver-exit-child.mjs URL SCHEMA IN_TX
//
// It serves a handler that throws behind createReceiver (recovery timeout
// an hour; inTransaction when IN_TX is "1"), sends it one keyed request,
// prints the status it got, closes its server and pool, prints what still
// holds the process ("resources: ...") and ends by itself: nothing of the
// receiver may keep it alive.

import http from 'node:http';

import pg from 'pg';

import { createReceiver } from '../dist/receiver.js';

const [url, schema, inTx] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url });
const receiver = createReceiver(pool, {
  schema,
  inTransaction: inTx === '1',
  recoveryTimeoutMs: 3_600_000,
  onError: () => {}, // the thrown error is expected
});
await receiver.migrate();
const handler = receiver.wrap(async (req) => {
  req.resume();
  throw new Error('handler bug');
});
const server = http.createServer(handler); // answers 500 handler-error
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const status = await new Promise((resolve, reject) => {
  const req = http.request({
    host: '127.0.0.1',
    port: server.address().port,
    method: 'POST',
    path: '/v1/charges',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'exit-1', Connection: 'close' },
  }, (res) => {
    res.resume();
    res.on('end', () => resolve(res.statusCode));
  });
  req.on('error', reject);
  req.end('{"amount":5}');
});
process.stdout.write(`answered ${status}\n`);
await new Promise((resolve) => server.close(resolve));
await pool.end();
process.stdout.write(`resources: ${process.getActiveResourcesInfo().join(',')}\n`);
