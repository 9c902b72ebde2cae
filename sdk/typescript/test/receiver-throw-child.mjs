// The process of the throwing-handler test of receiver.test.ts (plain
// JavaScript on the built library, so the test runner does not take it for
// a test file).
//
//   node receiver-throw-child.mjs URL SCHEMA IN_TX ON_ERROR
//
// It serves wrap(handler) on a plain http.createServer, as the README
// shows (no .catch of its own), with inTransaction when IN_TX is "1", and
// the onError option when ON_ERROR is "1" (else the default, console.error).
// A request with key "slow" is held in its handler while one with key "bug"
// throws; then "slow" is let go and "bug" retried. It prints one line per
// answer ("<key> <status> <content-type> <body>"), the handler's runs and
// what onError received, and ends by itself.

import http from 'node:http';

import pg from 'pg';

import { createReceiver } from '../dist/receiver.js';

const [url, schema, inTx, withOnError] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url });
const reports = [];
const receiver = createReceiver(pool, {
  schema,
  inTransaction: inTx === '1',
  ...(withOnError === '1'
    ? { onError: (err, req) => reports.push(`${req.method} ${req.url} ${req.headers['idempotency-key']}: ${err.message}`) }
    : {}),
});
await receiver.migrate();

let letGo;
const gate = new Promise((resolve) => (letGo = resolve));
let entered;
const slowEntered = new Promise((resolve) => (entered = resolve));
const runs = { slow: 0, bug: 0 };
const server = http.createServer(
  receiver.wrap(async (req, res) => {
    req.resume();
    const key = String(req.headers['idempotency-key']);
    runs[key]++;
    if (key === 'slow') {
      entered();
      await gate;
    } else if (runs[key] === 1) {
      throw new Error('handler bug');
    }
    res.statusCode = 201;
    res.setHeader('Content-Type', 'text/plain');
    res.end(`${key} done`);
  }),
);
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));

function send(key) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: server.address().port,
        method: 'POST',
        path: '/v1/charges',
        agent: false,
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
      },
      (res) => {
        const parts = [];
        res.on('data', (c) => parts.push(c));
        res.on('end', () => resolve(`${key} ${res.statusCode} ${res.headers['content-type']} ${Buffer.concat(parts).toString()}`));
      },
    );
    req.on('error', reject);
    req.end('{"amount":5}');
  });
}

const slow = send('slow');
await slowEntered;
process.stdout.write(`first: ${await send('bug')}\n`);
letGo();
process.stdout.write(`held: ${await slow}\n`);
process.stdout.write(`retry: ${await send('bug')}\n`);
process.stdout.write(`runs: ${JSON.stringify(runs)}\n`);
process.stdout.write(`reports: ${JSON.stringify(reports)}\n`);
await new Promise((resolve) => server.close(resolve));
await pool.end();
