// The first request of the crash tests of receiver.test.ts, run in a
// process of its own (plain JavaScript on the built library, so the test
// runner does not take it for a test file).
//
//   node receiver-crash-child.mjs URL SCHEMA TABLE KEY IN_TX RECOVERY_MS APPLICATION_NAME
//
// It serves a handler behind createReceiver (inTransaction when IN_TX is
// "1") and sends it one keyed request. The handler inserts the request's
// effect into TABLE (through currentClient() in a transaction, else through
// the pool, committed at once as a call to another system would be), prints
// "effect written" and hangs: the test kills the process there with SIGKILL,
// so nothing of the receiver runs after the effect.

import http from 'node:http';

import pg from 'pg';

import { createReceiver, currentClient } from '../dist/receiver.js';

const [url, schema, table, key, inTx, recoveryMs, applicationName] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url, application_name: applicationName });
const receiver = createReceiver(pool, {
  schema,
  inTransaction: inTx === '1',
  recoveryTimeoutMs: Number(recoveryMs),
  onError: (err) => {
    process.stderr.write(`handler failed: ${err.message}\n`);
    process.exit(2);
  },
});
const handler = receiver.wrap(async (req) => {
  req.resume();
  await (currentClient(req) ?? pool).query(`INSERT INTO ${table} (key) VALUES ($1)`, [key]);
  process.stdout.write('effect written\n');
  await new Promise(() => {}); // killed here
});
const server = http.createServer(handler);
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const req = http.request({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: '/v1/charges',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
  });
  req.on('error', () => {});
  req.end('{"amount":5}');
});
