// @drainer/client/receiver (docs/receiver.md). The fingerprint tests need
// nothing; the others need DRAINER_TEST_DATABASE_URL and work in a schema
// of their own, dropped afterwards. Requests go over real HTTP to a Node
// http server (wrap) and to an Express-style chain (middleware).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { after, before, test } from 'node:test';

import pg from 'pg';

import { canonicalTuple, encodedTuple, idempotencyKey } from '@drainer/client';
import {
  canonicalBody,
  checkKey,
  createReceiver,
  currentClient,
  fingerprint,
  type Handler,
  type Receiver,
  type ReceiverLogger,
  type ReceiverOptions,
} from '@drainer/client/receiver';

const url = process.env['DRAINER_TEST_DATABASE_URL'] ?? '';
const skipDb = url === '' ? 'DRAINER_TEST_DATABASE_URL is not set' : false;
const vectorsURL = new URL('../../../../receiver/testdata/fingerprint-vectors.json', import.meta.url);
const crashChild = new URL('../../test/receiver-crash-child.mjs', import.meta.url);
const exitChild = new URL('../../test/receiver-exit-child.mjs', import.meta.url);
const throwChild = new URL('../../test/receiver-throw-child.mjs', import.meta.url);

interface Vector {
  name: string;
  method: string;
  path: string;
  content_type: string;
  body: string;
  canonical: string;
  fingerprint: string;
}

test('fingerprints every vector of receiver/testdata/fingerprint-vectors.json like the Go receiver', () => {
  const vectors = JSON.parse(readFileSync(vectorsURL, 'utf8')) as Vector[];
  assert.ok(vectors.length > 10);
  for (const v of vectors) {
    const body = Buffer.from(v.body, 'utf8');
    assert.equal(canonicalBody(v.content_type, body).toString('utf8'), v.canonical, v.name);
    assert.equal(fingerprint(v.method, v.path, v.content_type, body).toString('hex'), v.fingerprint, v.name);
  }
});

test('checkKey: 1 to 255 bytes, no control characters', () => {
  assert.equal(checkKey('k'.repeat(255)), undefined);
  assert.equal(checkKey('ключ é'), undefined);
  for (const bad of ['', 'k'.repeat(256), 'é'.repeat(128), 'a\nb', 'a\x7fb', 'a\x00b']) {
    assert.notEqual(checkKey(bad), undefined, JSON.stringify(bad));
  }
});

test('bad options are refused, naming each', () => {
  const fake = { connect: async () => ({}) as never, query: async () => ({}) as never };
  assert.throws(() => createReceiver(fake, { mode: 'strict' as never, ttlMs: -1, maxBody: -1 }), /mode.*ttlMs|ttlMs.*mode/s);
});

let pool!: pg.Pool;
const schemas: string[] = [];

before(() => {
  if (url) pool = new pg.Pool({ connectionString: url, max: 20 });
});
after(async () => {
  if (!pool) return;
  for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await pool.end();
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One request over a fresh connection; body chunks are written one by one. */
function request(base: string, method: string, path: string, headers: Record<string, string>, chunks: Buffer[] = []): Promise<Answer> {
  const framed = { ...headers };
  if (!Object.keys(framed).some((h) => h.toLowerCase() === 'transfer-encoding')) {
    framed['Content-Length'] = String(chunks.reduce((n, c) => n + c.length, 0));
  }
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method, headers: framed, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

interface Fixture {
  base: string;
  rc: Receiver;
  runs: () => number;
  schema: string;
  records: () => Promise<number>;
  post: (key: string | undefined, body?: string, extra?: Record<string, string>, path?: string, method?: string) => Promise<Answer>;
  set: (h: Handler) => void;
}

/** Sets f's handler to answer 201 with body once released, and starts a POST of key "k". */
function heldPost(f: Fixture, body: string): { first: Promise<Answer>; inside: Promise<void>; release: () => void } {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  f.set(async (req, res) => {
    req.resume();
    entered();
    await gate;
    res.statusCode = 201;
    res.end(body);
  });
  return { first: f.post('k'), inside, release };
}

/** A receiver in a schema of its own, on on (default the tests' pool), behind a real HTTP server. */
async function fixture(opts: ReceiverOptions = {}, viaMiddleware = false, on: pg.Pool = pool): Promise<Fixture> {
  const schema = `ts_recv_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  schemas.push(schema);
  const rc = createReceiver(on, { schema, storeHeaders: ['X-Custom'], ...opts });
  await rc.migrate();
  let runs = 0;
  let current: Handler = (req, res) =>
    new Promise<void>((resolve) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        const n = runs;
        res.setHeader('Content-Type', 'application/json');
        res.setHeader('Location', `/v1/orders/${n}`);
        res.setHeader('X-Custom', 'kept');
        res.setHeader('X-Not-Stored', 'dropped');
        res.statusCode = 201;
        res.write(`{"run": ${n},`);
        res.end(` "bytes": ${Buffer.concat(parts).length}}`);
        resolve();
      });
    });
  const counted: Handler = (req, res) => {
    runs++;
    return current(req, res);
  };
  let server: http.Server;
  if (viaMiddleware) {
    const mw = rc.middleware();
    server = http.createServer((req, res) => {
      mw(req, res, (err?: unknown) => {
        if (err) {
          res.statusCode = 500;
          res.end('error');
          return;
        }
        // A route that uses the body the middleware read.
        const r = req as http.IncomingMessage & { rawBody?: Buffer; body?: unknown };
        runs++;
        res.statusCode = 201;
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ run: runs, got: r.body, raw: r.rawBody?.length ?? null }));
      });
    });
  } else {
    server = http.createServer(rc.wrap(counted)); // its function never rejects
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  after(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // a request left unanswered does not hold the test's end
      }),
  );
  const base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return {
    base,
    rc,
    schema,
    runs: () => runs,
    records: async () => Number((await pool.query(`SELECT count(*) AS n FROM "${schema}".records`)).rows[0].n),
    post: (key, body = '{}', extra = {}, path = '/v1/orders', method = 'POST') =>
      request(
        base,
        method,
        path,
        { 'Content-Type': 'application/json', ...(key === undefined ? {} : { 'Idempotency-Key': key }), ...extra },
        [Buffer.from(body)],
      ),
    set: (h) => {
      current = h;
    },
  };
}

function assertProblem(a: Answer, status: number, slug: string): void {
  assert.equal(a.status, status, a.body.toString());
  assert.equal(a.headers['content-type'], 'application/problem+json');
  const p = JSON.parse(a.body.toString());
  assert.equal(p.type, `https://drainer.dev/problems/${slug}`);
  assert.equal(p.status, status);
  assert.ok(p.title && p.detail);
}

for (const [mode, replayStatus, mismatchStatus] of [
  ['seed', 200, 409],
  ['ietf', 201, 422],
] as const) {
  test(`${mode}: first request, byte-identical replays, mismatch`, { skip: skipDb }, async () => {
    const f = await fixture({ mode });
    const first = await f.post('k1', '{"amount":5}');
    assert.equal(first.status, 201);
    assert.equal(first.headers['idempotency-replay'], 'false');
    for (let i = 0; i < 2; i++) {
      const again = await f.post('k1', '{ "amount" : 5.0 }');
      assert.equal(again.status, replayStatus);
      assert.deepEqual(again.body, first.body);
      assert.equal(again.headers['idempotency-replay'], 'true');
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(again.headers['location'], '/v1/orders/1');
      assert.equal(again.headers['x-custom'], 'kept');
      assert.equal(again.headers['x-not-stored'], undefined);
      assert.equal(again.headers['content-type'], 'application/json');
    }
    for (const a of [
      await f.post('k1', '{"amount":6}'),
      await f.post('k1', '{"amount":5}', {}, '/v1/other'),
      await f.post('k1', '{"amount":5}', {}, '/v1/orders', 'PUT'),
    ]) {
      assertProblem(a, mismatchStatus, 'payload-mismatch');
      assert.equal(a.headers['idempotency-conflict'], 'payload-mismatch');
    }
    assert.equal(f.runs(), 1);
  });
}

test('a non-JSON body is fingerprinted over its bytes', { skip: skipDb }, async () => {
  const f = await fixture();
  const text = { 'Content-Type': 'text/plain' };
  assert.equal((await f.post('k', '{"a":1}', text)).status, 201);
  assertProblem(await f.post('k', '{"a": 1}', text), 409, 'payload-mismatch');
  assert.equal((await f.post('k', '{"a":1}', text)).status, 200);
  assert.equal(f.runs(), 1);
});

test('in flight: 409 with Retry-After, then the replay', { skip: skipDb }, async () => {
  const f = await fixture();
  const { first, inside, release } = heldPost(f, 'made');
  await inside;
  const a = await f.post('k');
  assertProblem(a, 409, 'in-flight');
  assert.equal(a.headers['idempotency-conflict'], 'in-flight');
  assert.equal(a.headers['retry-after'], '1');
  release();
  assert.equal((await first).status, 201);
  const r = await f.post('k');
  assert.equal(r.headers['idempotency-replay'], 'true');
  assert.equal(r.body.toString(), 'made');
  assert.equal(f.runs(), 1);
});

test('the tuple header is checked against the key', { skip: skipDb }, async () => {
  const f = await fixture();
  const t = { agentRunId: 'run-1', stepId: 's1', toolName: 'charge', businessScope: 'inv:5' };
  const key = idempotencyKey(t);
  const enc = encodedTuple(t);
  assert.equal(Buffer.from(enc, 'base64url').toString(), canonicalTuple(t));
  assert.equal((await f.post(key, '{}', { 'X-Agent-Idempotency-Tuple': enc })).status, 201);
  for (const bad of [encodedTuple({ ...t, stepId: 's2' }), '***', enc + '==', 'eyJ4IjoxfQ', 'bm90IGpzb24']) {
    assertProblem(await f.post(key, '{}', { 'X-Agent-Idempotency-Tuple': bad }), 400, 'tuple-mismatch');
  }
  assertProblem(await f.post('other-key', '{}', { 'X-Agent-Idempotency-Tuple': enc }), 400, 'tuple-mismatch');
  assert.equal(f.runs(), 1);
  assert.equal(await f.records(), 1);
});

test('a key of an unknown version with a tuple header: 400 unsupported-key-version naming it; without one an opaque key', { skip: skipDb }, async () => {
  const f = await fixture();
  const t = { agentRunId: 'run-1', stepId: 's1', toolName: 'charge', businessScope: '' };
  const key = 'idem_v2_' + idempotencyKey(t).slice('idem_v1_'.length);
  const a = await f.post(key, '{}', { 'X-Agent-Idempotency-Tuple': encodedTuple(t) });
  assertProblem(a, 400, 'unsupported-key-version');
  const detail = JSON.parse(a.body.toString()).detail as string;
  assert.ok(detail.includes('v2') && detail.includes('idem_v1_'), detail);
  assert.equal(await f.records(), 0);
  // Without a tuple header the key is an opaque key like any other.
  assert.equal((await f.post(key)).status, 201);
  assert.equal(f.runs(), 1);
});

/** Sends raw bytes (header values Node's client refuses to send) and reads the status. */
function rawStatus(base: string, head: string): Promise<number> {
  const port = Number(new URL(base).port);
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(Buffer.from(head, 'latin1')));
    let data = '';
    s.on('data', (c) => {
      data += c.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(data);
      if (m) {
        s.destroy();
        resolve(Number(m[1]));
      }
    });
    s.on('error', reject);
  });
}

test('missing and invalid keys: 400; other methods pass through', { skip: skipDb }, async () => {
  const f = await fixture();
  for (const m of ['POST', 'PUT', 'PATCH', 'DELETE']) assertProblem(await f.post(undefined, '{}', {}, '/x', m), 400, 'missing-key');
  assertProblem(await f.post('k'.repeat(256)), 400, 'invalid-key');
  const head = (key: string) => `POST /x HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${key}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`;
  assert.equal(await rawStatus(f.base, head('a\tb')), 400);
  assert.equal(await rawStatus(f.base, head('a\x7fb')), 400);
  assert.equal(await rawStatus(f.base, head('\xff\xfe')), 400); // not UTF-8
  assert.equal(
    await rawStatus(f.base, 'POST /x HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\nContent-Length: 0\r\n\r\n'),
    400,
  );
  assert.equal(f.runs(), 0);
  const g = await request(f.base, 'GET', '/x', {});
  assert.equal(g.status, 201);
  assert.equal(g.headers['idempotency-replay'], undefined);
  assert.equal((await f.post('k'.repeat(255))).status, 201);
  assert.equal(await rawStatus(f.base, head(Buffer.from('ключ', 'utf8').toString('latin1'))), 201);
  assert.equal(f.runs(), 3);
});

test('a body over the limit: 413 before anything is stored; the whole body is read', { skip: skipDb }, async () => {
  const f = await fixture({ maxBody: 64 });
  assertProblem(await f.post('k', 'x'.repeat(65)), 413, 'too-large');
  const chunked = await request(f.base, 'POST', '/x', { 'Idempotency-Key': 'k', 'Transfer-Encoding': 'chunked' }, [
    Buffer.from('x'.repeat(40)),
    Buffer.from('x'.repeat(25)),
  ]);
  assertProblem(chunked, 413, 'too-large');
  assert.equal(await f.records(), 0);
  assert.equal(f.runs(), 0);
  const send = (last: string) =>
    request(f.base, 'POST', '/x', { 'Idempotency-Key': 'k', 'Transfer-Encoding': 'chunked' }, [
      Buffer.from('x'.repeat(32)),
      Buffer.from(last.repeat(32)),
    ]);
  const first = await send('y');
  assert.equal(first.status, 201);
  assert.match(first.body.toString(), /"bytes": 64/);
  assert.equal((await send('z')).status, 409);
  assert.equal((await send('y')).status, 200);
  assert.equal(f.runs(), 1);
});

test('5xx answers are not stored; 4xx are', { skip: skipDb }, async () => {
  const f = await fixture();
  let status = 503;
  f.set((req, res) => {
    req.resume();
    res.writeHead(status, { 'Content-Type': 'text/plain' });
    res.end('answer');
  });
  assert.equal((await f.post('k')).status, 503);
  assert.equal(await f.records(), 0);
  status = 422;
  assert.equal((await f.post('k')).status, 422);
  status = 201;
  const a = await f.post('k');
  assert.equal(a.status, 422);
  assert.equal(a.headers['idempotency-replay'], 'true');
  assert.equal(a.headers['content-type'], 'text/plain');
  assert.equal(f.runs(), 2);

  const g = await fixture({ storeServerErrors: true });
  g.set((req, res) => {
    req.resume();
    res.statusCode = status;
    res.end();
  });
  status = 500;
  await g.post('k');
  status = 201;
  assert.equal((await g.post('k')).status, 500);
  assert.equal(g.runs(), 1);
});

// A bound for a request never answered (a rejection nothing handles), not a judgement of speed.
test('a handler that throws: the record is released, 500 handler-error, the error to onError; wrap never rejects', { skip: skipDb, timeout: 60_000 }, async () => {
  const seen: string[] = [];
  const f = await fixture({ onError: (err, req) => seen.push(`${req.url}: ${(err as Error).message}`) });
  let fail = true;
  f.set(async (req, res) => {
    req.resume();
    if (fail) throw new Error('handler bug');
    res.statusCode = 201;
    res.end();
  });
  const a = await f.post('k');
  assertProblem(a, 500, 'handler-error');
  assert.equal(await f.records(), 0);
  fail = false;
  assert.equal((await f.post('k')).status, 201);
  assert.equal(f.runs(), 2);
  assert.deepEqual(seen, ['/v1/orders: handler bug']);

  // The function wrap returns resolves, whatever the handler did.
  const reports: string[] = [];
  const rc = createReceiver(pool, { schema: f.schema, onError: (err, req) => reports.push(`${req.url}: ${(err as Error).message}`) });
  const h = rc.wrap(() => {
    throw new Error('sync bug');
  });
  const server = http.createServer((req, res) => {
    h(req, res).then(
      () => undefined,
      (err: unknown) => reports.push(`rejected: ${String(err)}`),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    const json = { 'Content-Type': 'application/json' };
    assertProblem(await request(base, 'POST', '/keyed', { ...json, 'Idempotency-Key': 'sync' }, [Buffer.from('{}')]), 500, 'handler-error');
    assertProblem(await request(base, 'GET', '/unkeyed', {}), 500, 'handler-error');
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
  assert.deepEqual(reports, ['/keyed: sync bug', '/unkeyed: sync bug']);
  assert.equal(await f.records(), 1); // only the completed "k"
});

test('a handler that throws on a plain http.createServer(wrap(handler)): the process keeps serving', { skip: skipDb }, async () => {
  // Run in a process of its own: a rejection of wrap's function there would
  // be unhandled and end the process, and every request in flight with it.
  for (const [inTx, withOnError] of [
    ['0', '1'],
    ['1', '0'],
  ] as const) {
    const schema = `ts_recv_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    schemas.push(schema);
    const child = spawn(process.execPath, [throwChild.pathname, url, schema, inTx, withOnError], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let errors = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (errors += d.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      // A bound for a process that never ends, not a judgement of its speed.
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`inTransaction ${inTx}: the process had not ended after 60 s (output: ${out}${errors})`));
      }, 60_000);
      child.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    const what = `inTransaction ${inTx}, onError ${withOnError}: exit ${code}\n${out}${errors}`;
    assert.equal(code, 0, what);
    const lines = Object.fromEntries(out.trim().split('\n').map((l) => [l.slice(0, l.indexOf(': ')), l.slice(l.indexOf(': ') + 2)]));
    assert.match(lines['first'] ?? '', /^bug 500 application\/problem\+json \{"type":"https:\/\/drainer\.dev\/problems\/handler-error"/, what);
    assert.equal(lines['held'], 'slow 201 text/plain slow done', what); // the request in flight meanwhile
    assert.equal(lines['retry'], 'bug 201 text/plain bug done', what); // the record was released: the handler ran again
    assert.equal(lines['runs'], '{"slow":1,"bug":2}', what);
    if (withOnError === '1') {
      assert.equal(lines['reports'], JSON.stringify(['POST /v1/charges bug: handler bug']), what);
      assert.equal(errors, '', what);
    } else {
      assert.equal(lines['reports'], '[]', what);
      assert.match(errors, /POST \/v1\/charges: the handler failed:.*handler bug/s, what); // console.error
    }
    const n = await pool.query(`SELECT count(*) AS n FROM "${schema}".records`);
    assert.equal(Number(n.rows[0].n), 2, what); // slow and bug, completed
  }
});

test('a process whose handler threw ends once its server and pool are closed: nothing of the receiver holds it', { skip: skipDb }, async () => {
  // The recovery timeout is an hour: a timer of the receiver's left armed
  // by the throw would hold the process that long.
  for (const inTx of ['0', '1']) {
    const schema = `ts_recv_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    schemas.push(schema);
    const child = spawn(process.execPath, [exitChild.pathname, url, schema, inTx], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let errors = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (errors += d.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      // A bound for a process that never ends, not a judgement of its speed.
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`inTransaction ${inTx}: the process had not ended 60 s after its handler threw (output: ${out}${errors})`));
      }, 60_000);
      child.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    assert.equal(code, 0, `inTransaction ${inTx}: ${out}${errors}`);
    assert.match(out, /answered 500/, out);
    const held = /resources: (.*)/.exec(out)?.[1] ?? '';
    assert.ok(!held.split(',').includes('Timeout'), `inTransaction ${inTx}: a timer holds the process after everything closed: ${held}`);
  }
});

test('a database down: 503 with Retry-After, the handler not run', async () => {
  const probe = net.createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as net.AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const down = new pg.Pool({ connectionString: `postgresql://u@127.0.0.1:${port}/db`, connectionTimeoutMillis: 5000 });
  const rc = createReceiver(down);
  let runs = 0;
  const h = rc.wrap((_req, res) => {
    runs++;
    res.end();
  });
  const server = http.createServer((req, res) => void h(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const a = await request(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, 'POST', '/x', { 'Idempotency-Key': 'k' }, [
      Buffer.from('{}'),
    ]);
    assertProblem(a, 503, 'unavailable');
    assert.equal(a.headers['retry-after'], '1');
    assert.equal(runs, 0);
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
    await down.end();
  }
});

/** A logger that keeps what it was given. */
function capturingLogger(): ReceiverLogger & { lines: { level: string; message: string; fields: Record<string, string> }[] } {
  const lines: { level: string; message: string; fields: Record<string, string> }[] = [];
  return {
    lines,
    error: (message, fields) => lines.push({ level: 'error', message, fields }),
    warn: (message, fields) => lines.push({ level: 'warn', message, fields }),
  };
}

test('rerunAbandoned: a stale in-flight record is taken over; the late first completion is fenced off', { skip: skipDb }, async () => {
  const logger = capturingLogger();
  const f = await fixture({ rerunAbandoned: true, logger });
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  let calls = 0;
  f.set(async (req, res) => {
    req.resume();
    const n = ++calls;
    if (n === 1) {
      entered();
      await gate;
    }
    res.statusCode = 201;
    res.end(`call ${n}`);
  });
  const first = f.post('k');
  try {
    await inside;
    assertProblem(await f.post('k'), 409, 'in-flight');
    await pool.query(`UPDATE "${f.schema}".records SET locked_until = now() - interval '1 second'`);
    const second = await f.post('k');
    assert.equal(second.status, 201);
    assert.equal(second.body.toString(), 'call 2');
  } finally {
    release();
  }
  await first;
  const r = await f.post('k');
  assert.equal(r.body.toString(), 'call 2');
  assert.equal(r.headers['idempotency-replay'], 'true');
  assert.deepEqual(f.rc.abandonedTotal, { outcome_unknown: 0, rerun: 1 });
  assert.deepEqual(
    logger.lines.map((l) => [l.level, l.fields['key']]),
    [['warn', 'k']],
  );
});

test('outcome unknown: never run again; a handler only cut off from the database still stores its late answer', { skip: skipDb }, async () => {
  // The first handler holds the only connection of its receiver's pool, so
  // its deadline cannot move and lapses; retries go to another receiver.
  const logger = capturingLogger();
  const f = await fixture({ logger });
  const cutOff = new pg.Pool({ connectionString: url, max: 1 });
  after(() => cutOff.end());
  const first = createReceiver(cutOff, { schema: f.schema, recoveryTimeoutMs: 1000 });
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  const h = first.wrap(async (req, res) => {
    req.resume();
    const c = await cutOff.connect();
    entered();
    await gate;
    c.release();
    res.statusCode = 201;
    res.end('late');
  });
  const server = http.createServer((req, res) => void h(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const answer = request(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, 'POST', '/v1/orders',
    { 'Content-Type': 'application/json', 'Idempotency-Key': 'k' }, [Buffer.from('{}')]);
  try {
    await inside;
    for (let i = 0; ; i++) {
      if ((await pool.query(`SELECT locked_until < now() AS lapsed FROM "${f.schema}".records`)).rows[0].lapsed) break;
      assert.ok(i < 2400, "the cut-off handler's deadline never lapsed");
      await new Promise((r) => setTimeout(r, 50));
    }
    for (let i = 0; i < 2; i++) {
      const a = await f.post('k');
      assertProblem(a, 409, 'outcome-unknown');
      assert.equal(a.headers['idempotency-conflict'], 'outcome-unknown');
      assert.equal(JSON.parse(a.body.toString()).idempotency_key, 'k');
    }
    assertProblem(await f.post('k', '{"other":1}'), 409, 'payload-mismatch');
  } finally {
    release();
  }
  assert.equal((await answer).status, 201);
  const a = await f.post('k');
  assert.deepEqual([a.status, a.headers['idempotency-replay'], a.body.toString()], [200, 'true', 'late']);
  assert.equal(f.runs(), 0);
  assert.deepEqual(f.rc.abandonedTotal, { outcome_unknown: 1, rerun: 0 });
  assert.match(f.rc.metrics(), /^drainer_receiver_abandoned_total\{outcome="outcome_unknown"\} 1$/m);
  assert.deepEqual(
    logger.lines.map((l) => [l.level, l.fields['scope'], l.fields['key']]),
    [['error', '', 'k']],
  );
});

test('a handler running longer than the recovery timeout keeps its record', { skip: skipDb }, async () => {
  const f = await fixture({ recoveryTimeoutMs: 3000 });
  const { first, inside, release } = heldPost(f, 'slow');
  await inside;
  const deadline = (await pool.query(`SELECT locked_until::text AS t FROM "${f.schema}".records`)).rows[0].t;
  // Wait (generously) until the database clock passed the first deadline.
  for (let i = 0; ; i++) {
    if ((await pool.query('SELECT now() > $1::timestamptz AS past', [deadline])).rows[0].past) break;
    assert.ok(i < 1200, 'the database clock never passed the first deadline');
    await new Promise((r) => setTimeout(r, 100));
  }
  assertProblem(await f.post('k'), 409, 'in-flight');
  release();
  assert.equal((await first).status, 201);
  const a = await f.post('k');
  assert.equal(a.status, 200);
  assert.equal(a.body.toString(), 'slow');
  assert.equal(f.runs(), 1);
});

test('an extension the database does not answer does not hold the answer', { skip: skipDb }, async () => {
  // A lock held by another transaction stands in for a connection that
  // died without a word: the waiting extension is given up within its
  // bound once the handler returned, and the answer is stored as usual.
  const f = await fixture({ recoveryTimeoutMs: 3000 });
  const { first, inside, release } = heldPost(f, 'done');
  await inside;
  const locker = await pool.connect();
  try {
    await locker.query('BEGIN');
    await locker.query(`SELECT 1 FROM "${f.schema}".records WHERE key = 'k' FOR UPDATE`);
    const waiting = async (): Promise<number> =>
      (
        await pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database()
             AND wait_event_type = 'Lock' AND query LIKE '%SET locked_until = now()%'`,
        )
      ).rows[0].n;
    // Bounds for a loaded machine: the extension's own is a second.
    for (let i = 0; (await waiting()) === 0; i++) {
      assert.ok(i < 1200, "no extension waited on the record's lock");
      await new Promise((r) => setTimeout(r, 100));
    }
    release();
    for (let i = 0; (await waiting()) > 0; i++) {
      assert.ok(i < 600, 'the waiting extension was not given up after the handler returned');
      await new Promise((r) => setTimeout(r, 100));
    }
    await locker.query('ROLLBACK');
  } finally {
    locker.release();
  }
  assert.equal((await first).status, 201);
  const a = await f.post('k');
  assert.equal(a.status, 200);
  assert.equal(a.body.toString(), 'done');
  assert.equal(f.runs(), 1);
});

test('expiry by the database clock; the same key in two scopes is two records', { skip: skipDb }, async () => {
  const f = await fixture({ ttlMs: 3600_000 });
  assert.equal((await f.post('k', '{"a":1}')).status, 201);
  const ttl = await pool.query(`SELECT expires_at - created_at = interval '1 hour' AS ok FROM "${f.schema}".records`);
  assert.equal(ttl.rows[0].ok, true);
  await pool.query(`UPDATE "${f.schema}".records SET created_at = now() + interval '1 year', expires_at = now() + interval '1 year'`);
  assert.equal((await f.post('k', '{"a":1}')).status, 200);
  await pool.query(`UPDATE "${f.schema}".records SET expires_at = now() - interval '1 microsecond'`);
  const a = await f.post('k', '{"a":2}');
  assert.equal(a.status, 201);
  assert.equal(a.headers['idempotency-replay'], 'false');
  assert.equal(f.runs(), 2);

  const g = await fixture({ scope: (req) => String(req.headers['x-account'] ?? '') });
  assert.equal((await g.post('k', '{"a":1}', { 'X-Account': 'a1' })).status, 201);
  assert.equal((await g.post('k', '{"a":2}', { 'X-Account': 'a2' })).status, 201);
  assert.equal((await g.post('k', '{"a":1}', { 'X-Account': 'a1' })).status, 200);
  assertProblem(await g.post('k', '{"a":1}', { 'X-Account': 'a2' }), 409, 'payload-mismatch');
  assert.equal(g.runs(), 2);
  assert.equal(await g.records(), 2);
});

// A record whose TTL passes while its first request is still running (its
// recovery deadline still ahead) is not a new first request: a retry
// answers in-flight (another request payload-mismatch) as before the
// expiry, and the handler runs once. The first handler is held until the
// retries have been answered, and the test waits for the database clock to
// see the record expired, so nothing depends on timing.
test('a record that expires while its first request runs: in-flight, the handler runs once', { skip: skipDb }, async () => {
  const f = await fixture({ ttlMs: 50, recoveryTimeoutMs: 3600_000 });
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  let calls = 0;
  f.set(async (req, res) => {
    req.resume();
    const n = ++calls;
    if (n === 1) {
      entered();
      await gate;
    }
    res.statusCode = 201;
    res.end(n === 1 ? 'first' : 'again');
  });
  const first = f.post('k');
  try {
    await inside;
    const records = `"${f.schema}".records`;
    for (let i = 0; ; i++) {
      const r = await pool.query(`SELECT expires_at <= now() AS expired, locked_until > now() AS ahead FROM ${records}`);
      assert.equal(r.rows[0].ahead, true, 'the recovery deadline passed');
      if (r.rows[0].expired) break;
      assert.ok(i < 500, 'the record did not expire');
      await new Promise((r) => setTimeout(r, 20));
    }
    assertProblem(await f.post('k'), 409, 'in-flight');
    assertProblem(await f.post('k', '{"other":1}'), 409, 'payload-mismatch');
    // Decided by the plain read, without the row lock: while another
    // transaction holds it, the answers are the same.
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM ${records} WHERE key = 'k' FOR UPDATE`);
      assertProblem(await f.post('k', '{"other":1}'), 409, 'payload-mismatch');
      assertProblem(await f.post('k'), 409, 'in-flight');
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
    assert.equal(f.runs(), 1);
  } finally {
    release();
  }
  const a = await first;
  assert.equal(a.status, 201);
  assert.equal(a.body.toString(), 'first');
  const rec = await pool.query(`SELECT state, status FROM "${f.schema}".records WHERE key = 'k'`);
  assert.deepEqual([rec.rows[0].state, rec.rows[0].status], ['completed', 201]);
  assert.equal(f.runs(), 1);
});

// An expired record is a new first request when it is completed, marked
// outcome_unknown, or in flight past its recovery deadline (its process
// stopped): the TTL ends what the key held.
test('an expired completed, outcome_unknown or abandoned record is a new first request', { skip: skipDb }, async () => {
  const f = await fixture();
  let i = 0;
  for (const state of ['completed', 'outcome_unknown', 'in_flight']) {
    await pool.query(
      `INSERT INTO "${f.schema}".records (scope, key, fingerprint, state, locked_until, status, headers, body, expires_at)
       VALUES ('', $1, '\\x00', $1, now() - interval '1 second', 201, '{}', '', now() - interval '1 second')`,
      [state],
    );
    const a = await f.post(state);
    assert.equal(a.status, 201, state);
    assert.equal(a.headers['idempotency-replay'], 'false', state);
    assert.equal(f.runs(), ++i, state);
  }
});

for (const inTransaction of [false, true]) {
  test(`50 concurrent requests with one key: one effect (inTransaction ${inTransaction})`, { skip: skipDb }, async () => {
    const f = await fixture({ inTransaction });
    let effects = 0;
    f.set(async (req, res) => {
      req.resume();
      effects++;
      await new Promise((r) => setTimeout(r, 20));
      res.statusCode = 201;
      res.end('{"id":1}');
    });
    const answers = await Promise.all(Array.from({ length: 50 }, () => f.post('same', '{"a":1}')));
    const codes = answers.map((a) => a.status);
    assert.equal(effects, 1, String(codes));
    assert.equal(codes.filter((c) => c === 201).length, 1, String(codes));
    assert.equal(codes.filter((c) => c === 200 || c === 201 || c === 409).length, 50, String(codes));
    // Once completed, concurrent retries all get the replay.
    const replays = await Promise.all(Array.from({ length: 50 }, () => f.post('same', '{"a":1}')));
    assert.deepEqual(
      replays.map((a) => a.status),
      Array.from({ length: 50 }, () => 200),
    );
    assert.equal(effects, 1);
  });
}

test('inTransaction: the effect and the record commit together', { skip: skipDb }, async () => {
  const f = await fixture({ inTransaction: true });
  const table = `"${f.schema}".effects`;
  await pool.query(`CREATE TABLE ${table} (k text)`);
  let mode: 'ok' | '500' | 'throw' = '500';
  f.set(async (req, res) => {
    req.resume();
    const c = currentClient(req);
    assert.ok(c, 'no transaction client');
    await c.query(`INSERT INTO ${table} VALUES ('x')`);
    if (mode === 'throw') throw new Error('after the effect');
    res.statusCode = mode === '500' ? 500 : 201;
    res.end();
  });
  const effects = async () => Number((await pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
  assert.equal((await f.post('k')).status, 500);
  mode = 'throw';
  assert.equal((await f.post('k')).status, 500);
  assert.equal(await effects(), 0);
  assert.equal(await f.records(), 0);
  mode = 'ok';
  assert.equal((await f.post('k')).status, 201);
  assert.equal((await f.post('k')).status, 200);
  assert.equal(await effects(), 1);
  assert.equal(await f.records(), 1);
  assert.equal(f.runs(), 3);
});

test('migrate upgrades a store of an earlier version in place', { skip: skipDb }, async () => {
  const schema = `ts_recv_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  schemas.push(schema);
  await pool.query(`CREATE SCHEMA "${schema}";
CREATE TABLE "${schema}".records (
    scope text NOT NULL, key text NOT NULL, fingerprint bytea NOT NULL, state text NOT NULL,
    locked_until timestamptz, status integer, headers jsonb, body bytea,
    created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz, expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key), CHECK (state IN ('in_flight', 'completed')));
CREATE INDEX records_expires_idx ON "${schema}".records (expires_at)`);
  const fp = fingerprint('POST', '/v1/orders', 'application/json', Buffer.from('{}'));
  await pool.query(
    `INSERT INTO "${schema}".records (scope, key, fingerprint, state, status, headers, body, completed_at, expires_at, locked_until)
     VALUES ('', 'old', $1, 'completed', 201, '{}', 'stored before', now(), now() + interval '1 hour', NULL),
            ('', 'stuck', $1, 'in_flight', NULL, NULL, NULL, NULL, now() + interval '1 hour', now() - interval '1 second')`,
    [fp],
  );
  const logger = capturingLogger();
  const f = await fixture({ schema, logger }); // migrates
  await f.rc.migrate();
  const checks = await pool.query(
    `SELECT array_agg(conname::text ORDER BY conname) AS names FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`,
    [`"${schema}".records`],
  );
  assert.deepEqual(checks.rows[0].names, ['records_state']);
  const a = await f.post('old');
  assert.deepEqual([a.status, a.body.toString()], [200, 'stored before']);
  assertProblem(await f.post('stuck'), 409, 'outcome-unknown');
  assert.equal(f.runs(), 0);
  assert.equal(logger.lines.length, 1);
});

/** Polls a boolean query (column ok) until it is true, for at most two minutes. */
async function waitFor(what: string, query: string, params: unknown[] = []): Promise<void> {
  for (let i = 0; ; i++) {
    if ((await pool.query(query, params)).rows[0].ok) return;
    assert.ok(i < 2400, `waited 2 minutes for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Runs the first request with key in a child process (receiver-crash-child.mjs),
 * kills it with SIGKILL once its handler wrote the effect into table, and
 * resolves once the database dropped the child's connections.
 */
async function killChildMidRequest(schema: string, table: string, key: string, inTx: boolean, recoveryMs: number): Promise<void> {
  const app = `ts_crash_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const child = spawn(
    process.execPath,
    [crashChild.pathname, url, schema, table, key, inTx ? '1' : '0', String(recoveryMs), app],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let out = '';
  let errors = '';
  child.stderr.on('data', (d: Buffer) => (errors += d.toString()));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the crash child wrote no effect within 2 minutes: ${errors}`)), 120_000);
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('effect written\n')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the crash child exited (${code}) before writing its effect: ${errors}`));
      });
    });
  } finally {
    child.kill('SIGKILL'); // nothing of the receiver runs after the effect
    await exited;
  }
  await waitFor("the killed child's connections to end", 'SELECT count(*) = 0 AS ok FROM pg_stat_activity WHERE application_name = $1', [app]);
}

test('a process killed mid-request outside inTransaction: 409 outcome-unknown, reported once, never run again', { skip: skipDb }, async () => {
  const logger = capturingLogger();
  const f = await fixture({ logger });
  const table = `"${f.schema}".crash_effects`;
  await pool.query(`CREATE TABLE ${table} (key text NOT NULL)`);
  await killChildMidRequest(f.schema, table, 'charge-7f3a', false, 1000);
  await waitFor("the record's deadline to pass", `SELECT coalesce(bool_and(locked_until < now()), false) AS ok FROM "${f.schema}".records`);
  for (let i = 0; i < 3; i++) {
    const a = await f.post('charge-7f3a', '{"amount":5}', {}, '/v1/charges');
    assertProblem(a, 409, 'outcome-unknown');
    assert.equal(a.headers['idempotency-conflict'], 'outcome-unknown');
    assert.equal(JSON.parse(a.body.toString()).idempotency_key, 'charge-7f3a');
  }
  assert.equal(f.runs(), 0);
  assert.equal(Number((await pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n), 1);
  assert.deepEqual(f.rc.abandonedTotal, { outcome_unknown: 1, rerun: 0 });
  assert.match(f.rc.metrics(), /^drainer_receiver_abandoned_total\{outcome="outcome_unknown"\} 1$/m);
  assert.deepEqual(
    logger.lines.map((l) => [l.level, l.fields['scope'], l.fields['key']]),
    [['error', '', 'charge-7f3a']],
  );
  const state = await pool.query(`SELECT state FROM "${f.schema}".records`);
  assert.deepEqual(state.rows, [{ state: 'outcome_unknown' }]);
});

test('a process killed mid-request with rerunAbandoned: the retry runs the handler again, reported', { skip: skipDb }, async () => {
  const logger = capturingLogger();
  const f = await fixture({ rerunAbandoned: true, logger });
  const table = `"${f.schema}".crash_effects`;
  await pool.query(`CREATE TABLE ${table} (key text NOT NULL)`);
  await killChildMidRequest(f.schema, table, 'charge-9c41', false, 1000);
  await waitFor("the record's deadline to pass", `SELECT coalesce(bool_and(locked_until < now()), false) AS ok FROM "${f.schema}".records`);
  assert.equal((await f.post('charge-9c41', '{"amount":5}', {}, '/v1/charges')).status, 201);
  assert.equal((await f.post('charge-9c41', '{"amount":5}', {}, '/v1/charges')).status, 200);
  assert.equal(f.runs(), 1);
  assert.deepEqual(f.rc.abandonedTotal, { outcome_unknown: 0, rerun: 1 });
  assert.deepEqual(
    logger.lines.map((l) => [l.level, l.fields['key']]),
    [['warn', 'charge-9c41']],
  );
});

test('a process killed mid-request in inTransaction: record and effect rolled back; the retry runs once at once', { skip: skipDb }, async () => {
  const f = await fixture({ inTransaction: true });
  const table = `"${f.schema}".crash_effects`;
  await pool.query(`CREATE TABLE ${table} (key text NOT NULL)`);
  await killChildMidRequest(f.schema, table, 'charge-2b08', true, 600_000);
  const effects = async () => Number((await pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
  assert.deepEqual([await effects(), await f.records()], [0, 0]);
  f.set(async (req, res) => {
    req.resume();
    await currentClient(req)!.query(`INSERT INTO ${table} (key) VALUES ('charge-2b08')`);
    res.statusCode = 201;
    res.end();
  });
  assert.equal((await f.post('charge-2b08', '{"amount":5}', {}, '/v1/charges')).status, 201);
  assert.equal((await f.post('charge-2b08', '{"amount":5}', {}, '/v1/charges')).status, 200);
  assert.deepEqual([f.runs(), await effects(), await f.records()], [1, 1, 1]);
  assert.deepEqual(f.rc.abandonedTotal, { outcome_unknown: 0, rerun: 0 });
});

/**
 * A server behind the receiver whose keyed route is handler: through
 * middleware() (an Express-style chain: the route runs as next()), or
 * through wrap(handler), its promise awaited ('wrap') or not ('wrap-callback',
 * a callback-style handler that answers later).
 */
async function hangUpServer(
  via: 'middleware' | 'wrap' | 'wrap-callback',
  opts: ReceiverOptions,
  handler: (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void>,
): Promise<{ base: string; schema: string; table: string }> {
  const schema = `ts_recv_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  schemas.push(schema);
  const rc = createReceiver(pool, { schema, ...opts });
  await rc.migrate();
  const table = `"${schema}".effects`;
  await pool.query(`CREATE TABLE ${table} (k text PRIMARY KEY)`);
  let server: http.Server;
  if (via === 'middleware') {
    const mw = rc.middleware();
    server = http.createServer((req, res) =>
      mw(req, res, (err?: unknown) => {
        if (err) {
          res.statusCode = 500;
          res.end('error');
          return;
        }
        void handler(req, res); // an Express route: its promise is not awaited
      }),
    );
  } else {
    const h = rc.wrap(
      via === 'wrap'
        ? handler
        : (req, res) => {
            void handler(req, res);
          },
    );
    server = http.createServer((req, res) => void h(req, res).catch(() => {}));
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { base: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, schema, table };
}

/** Starts a keyed POST and hangs up once entered resolves; resolves when the client saw its connection go. */
async function postAndHangUp(base: string, key: string, entered: Promise<void>): Promise<void> {
  const req = http.request(base + '/v1/orders', {
    method: 'POST',
    agent: false,
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key, 'Content-Length': '2' },
  });
  const gone = new Promise<void>((resolve) => {
    req.on('error', () => resolve());
    req.on('close', () => resolve());
  });
  req.on('response', () => assert.fail('the client got an answer before it hung up'));
  req.end('{}');
  await entered;
  req.destroy(); // the caller's timeout
  await gone;
}

/** Retries key until the answer is not 409 in-flight (the first request is still committing). */
async function retryUntilSettled(base: string, key: string): Promise<Answer> {
  for (let i = 0; ; i++) {
    const a = await request(base, 'POST', '/v1/orders', { 'Content-Type': 'application/json', 'Idempotency-Key': key }, [Buffer.from('{}')]);
    if (a.status !== 409 || a.headers['idempotency-conflict'] !== 'in-flight' || i >= 200) return a;
    await new Promise((r) => setTimeout(r, 25));
  }
}

for (const via of ['middleware', 'wrap', 'wrap-callback'] as const) {
  for (const inTransaction of [true, false]) {
    test(`${via}: a client that hangs up mid-handler cancels nothing; one effect, one record, the retry gets the replay (inTransaction ${inTransaction})`, { skip: skipDb }, async () => {
      let runs = 0;
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      let finish!: (err?: unknown) => void;
      const handled = new Promise<unknown>((r) => (finish = r));
      let table = '';
      // A handler slower than its caller: it writes its effect and answers
      // only after the client is gone (its response closed).
      const { base, table: t } = await hangUpServer(via, { inTransaction }, async (req, res) => {
        runs++;
        const closed = new Promise<void>((r) => res.once('close', () => r()));
        if (runs === 1) {
          entered();
          await closed;
          await new Promise((r) => setTimeout(r, 100));
        }
        try {
          const q = inTransaction ? currentClient(req) : pool;
          assert.ok(q, "the handler's transaction client is gone");
          await q.query(`INSERT INTO ${table} VALUES ('order-1')`);
          res.statusCode = 201;
          res.setHeader('Content-Type', 'application/json');
          res.end('{"order":1}');
          finish();
        } catch (err) {
          finish(err);
          res.statusCode = 500;
          res.end();
        }
      });
      table = t;
      await postAndHangUp(base, 'k', inside);
      assert.equal(await handled, undefined, 'the handler failed after the hang-up');
      const retry = await retryUntilSettled(base, 'k');
      assert.equal(retry.status, 200, retry.body.toString());
      assert.equal(retry.headers['idempotency-replay'], 'true');
      assert.equal(retry.body.toString(), '{"order":1}');
      const effects = Number((await pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
      const records = Number((await pool.query(`SELECT count(*) AS n FROM ${table.replace('.effects', '.records')} WHERE state = 'completed'`)).rows[0].n);
      assert.deepEqual({ runs, effects, records }, { runs: 1, effects: 1, records: 1 });
    });
  }
}

test('middleware: a handler that never answers after its client left holds its key at most recoveryTimeoutMs', { skip: skipDb }, async () => {
  // With the record in the handler's transaction: its rollback frees the
  // key. (Without it, whether the retry finds the record released or, its
  // recovery deadline passed first, abandoned as outcome-unknown depends
  // on the machine's speed: both are the contract's answers.)
  for (const inTransaction of [true]) {
    let runs = 0;
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const { base, table } = await hangUpServer('middleware', { inTransaction, recoveryTimeoutMs: 500 }, async (req, res) => {
      runs++;
      if (runs === 1) {
        // Stops when its client leaves, without an answer.
        entered();
        return;
      }
      await (inTransaction ? currentClient(req)! : pool).query(`INSERT INTO ${table} VALUES ('order-1')`);
      res.statusCode = 201;
      res.end('{"order":2}');
    });
    const started = Date.now();
    await postAndHangUp(base, 'k', inside);
    const retry = await retryUntilSettled(base, 'k');
    assert.equal(retry.status, 201, retry.body.toString());
    assert.ok(Date.now() - started < 10_000, 'the key was held too long');
    assert.equal(runs, 2);
  }
});

test('inTransaction: idleInTransactionTimeoutMs reaches the server (default 1 minute; negative: the server setting)', { skip: skipDb }, async () => {
  const server = (await pool.query(`SELECT current_setting('idle_in_transaction_session_timeout') AS v`)).rows[0].v;
  for (const [opt, want] of [
    [undefined, '1min'],
    [1500, '1500ms'],
    [-1, server],
  ] as const) {
    const f = await fixture({ inTransaction: true, ...(opt === undefined ? {} : { idleInTransactionTimeoutMs: opt }) });
    let seen = '';
    f.set(async (req, res) => {
      req.resume();
      seen = (await currentClient(req)!.query(`SELECT current_setting('idle_in_transaction_session_timeout') AS v`)).rows[0].v;
      res.statusCode = 201;
      res.end();
    });
    assert.equal((await f.post('k')).status, 201);
    assert.equal(seen, want, String(opt));
  }
  const fake = { connect: async () => ({}) as never, query: async () => ({}) as never };
  for (const bad of [0, 0.5, Number.NaN, 2 ** 31]) {
    assert.throws(() => createReceiver(fake, { idleInTransactionTimeoutMs: bad }), /idleInTransactionTimeoutMs/, String(bad));
  }
});

test('inTransaction: a handler idle in its transaction past idleInTransactionTimeoutMs commits nothing; the process goes on', { skip: skipDb }, async () => {
  const f = await fixture({ inTransaction: true, idleInTransactionTimeoutMs: 200 });
  const table = `"${f.schema}".effects`;
  await pool.query(`CREATE TABLE ${table} (k text)`);
  let slow = true;
  f.set(async (req, res) => {
    req.resume();
    const c = currentClient(req)!;
    if (slow) {
      // Waiting on another service, no statement, until the server ended
      // the session (however long a loaded machine takes to).
      const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      for (let i = 0; i < 600; i++) {
        const n = Number((await pool.query('SELECT count(*) AS n FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0].n);
        if (n === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    try {
      await c.query(`INSERT INTO ${table} VALUES ('x')`);
    } catch {
      res.statusCode = 502;
      res.end('lost its transaction');
      return;
    }
    res.statusCode = 201;
    res.end();
  });
  const a = await f.post('k');
  assert.ok(a.status >= 500, `${a.status} ${a.body.toString()}`);
  assert.equal(Number((await pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n), 0);
  assert.equal(await f.records(), 0);
  slow = false;
  assert.equal((await f.post('k')).status, 201);
  assert.equal((await f.post('k')).status, 200);
  assert.equal(f.runs(), 2);
});

// With inTransaction each keyed request holds a client of the pool for its
// whole handler: when none comes free within the pool's
// connectionTimeoutMillis, the 503 says the pool was exhausted, not that the
// store could not be reached. The pool has one client, held by a running
// handler.
test('inTransaction: no pool client free within connectionTimeoutMillis: 503 pool-exhausted naming the pool size', { skip: skipDb }, async () => {
  const one = new pg.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 1000 });
  try {
    const f = await fixture({ inTransaction: true }, false, one);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    f.set(async (req, res) => {
      req.resume();
      if (req.headers['idempotency-key'] === 'k1') {
        entered();
        await gate;
      }
      res.statusCode = 201;
      res.end();
    });
    const first = f.post('k1');
    await inside;
    let a: Answer;
    try {
      a = await f.post('k2');
    } finally {
      release();
    }
    assertProblem(a, 503, 'pool-exhausted');
    assert.equal(a.headers['retry-after'], '1');
    const detail = JSON.parse(a.body.toString()).detail as string;
    assert.ok(detail.includes('all 1 were in use') && detail.includes("raise the pool's max"), detail);
    assert.equal((await first).status, 201);
    assert.equal(f.runs(), 1);
    assert.equal(await f.records(), 1);
    // Once the client is free again the retry goes through.
    assert.equal((await f.post('k2')).status, 201);
  } finally {
    await one.end();
  }
});

// Under SERIALIZABLE, a request's transaction the database aborts with a
// serialization failure (40001) is answered 503 naming it, with
// Retry-After, not blaming the store. The handler reads skew_b and writes
// skew_a; meanwhile another transaction reads skew_a, writes skew_b and
// commits first (write skew), so the request's transaction cannot commit.
test('inTransaction: a serialization failure is answered 503 serialization-failure; nothing committed, the retry runs', { skip: skipDb }, async () => {
  const ser = new pg.Pool({ connectionString: url, max: 4, options: '-c default_transaction_isolation=serializable' });
  try {
    const f = await fixture({ inTransaction: true }, false, ser);
    const a_ = `"${f.schema}".skew_a`;
    const b_ = `"${f.schema}".skew_b`;
    await ser.query(`CREATE TABLE ${a_} (x int); CREATE TABLE ${b_} (x int)`);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    f.set(async (req, res) => {
      req.resume();
      const c = currentClient(req)!;
      await c.query(`SELECT count(*) FROM ${b_}`);
      await c.query(`INSERT INTO ${a_} VALUES (1)`);
      entered();
      await gate;
      res.statusCode = 201;
      res.end('made');
    });
    const answer = f.post('k');
    let a: Answer;
    try {
      await Promise.race([inside, answer.then((x) => assert.fail(`the handler did not get to wait: ${x.status} ${x.body}`))]);
      const other = await ser.connect();
      try {
        await other.query('BEGIN');
        await other.query(`SELECT count(*) FROM ${a_}`);
        await other.query(`INSERT INTO ${b_} VALUES (1)`);
        await other.query('COMMIT');
      } finally {
        other.release();
      }
    } finally {
      release();
      a = await answer;
    }
    assertProblem(a, 503, 'serialization-failure');
    assert.equal(a.headers['retry-after'], '1');
    const detail = JSON.parse(a.body.toString()).detail as string;
    assert.ok(detail.includes('40001') && detail.includes('nothing was committed'), detail);
    assert.equal(await f.records(), 0);
    assert.equal(Number((await pool.query(`SELECT count(*) AS n FROM ${a_}`)).rows[0].n), 0);
    // Retried with the same key, it runs again and commits.
    assert.equal((await f.post('k')).status, 201);
    assert.equal(f.runs(), 2);
  } finally {
    await ser.end();
  }
});

test('middleware(): an Express-style chain gets the body it read', { skip: skipDb }, async () => {
  const f = await fixture({}, true);
  const a = await f.post('k', '{"b":1, "a":[2]}');
  assert.equal(a.status, 201);
  assert.deepEqual(JSON.parse(a.body.toString()), { run: 1, got: { b: 1, a: [2] }, raw: 16 });
  const b = await f.post('k', '{"a":[2],"b":1}');
  assert.equal(b.status, 200);
  assert.deepEqual(b.body, a.body);
  assertProblem(await f.post('k', '{"a":[3]}'), 409, 'payload-mismatch');
  assert.equal(f.runs(), 1);
});

test('prune deletes expired records in batches, and only those', { skip: skipDb }, async () => {
  const f = await fixture();
  await pool.query(`INSERT INTO "${f.schema}".records (scope, key, fingerprint, state, status, headers, body, expires_at)
    SELECT '', 'old' || i, '\\x00', 'completed', 201, '{}', '', now() - interval '1 second' FROM generate_series(1, 2500) i`);
  await pool.query(`INSERT INTO "${f.schema}".records (scope, key, fingerprint, state, locked_until, expires_at)
    SELECT '', 'live' || i, '\\x00', 'in_flight', now() + interval '1 minute', now() + interval '1 hour' FROM generate_series(1, 10) i`);
  assert.equal(await f.rc.prune(), 2500);
  assert.equal(await f.records(), 10);
});

test('migrate on an up-to-date store does not wait for a transaction holding the records table', { skip: skipDb }, async () => {
  const f = await fixture(); // migrates
  const holder = await pool.connect();
  try {
    // A request's transaction (inTransaction) that claimed its record: it
    // holds the table's RowExclusiveLock until it ends.
    await holder.query('BEGIN');
    await holder.query(
      `INSERT INTO "${f.schema}".records (scope, key, fingerprint, state, locked_until, expires_at)
       VALUES ('', 'running', '\\x00', 'in_flight', now() + interval '1 minute', now() + interval '1 hour')`,
    );
    // Generous: an up-to-date migrate takes milliseconds; one that waits
    // for the holder waits until this bound, as the holder commits only
    // after migrate has settled.
    let timer!: NodeJS.Timeout;
    const outcome = await Promise.race([
      f.rc.migrate().then(
        () => 'returned',
        (err: unknown) => `failed: ${String(err)}`,
      ),
      new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still waiting after 30 s'), 30_000))),
    ]);
    clearTimeout(timer);
    assert.equal(outcome, 'returned', 'migrate while a request holds the records table');
    await holder.query('COMMIT');
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    holder.release();
  }
  assert.equal(await f.records(), 1);
  // A store missing a part is still completed.
  await pool.query(`DROP INDEX "${f.schema}".records_expires_idx`);
  await f.rc.migrate();
  const idx = await pool.query('SELECT to_regclass($1) IS NOT NULL AS ok', [`"${f.schema}".records_expires_idx`]);
  assert.equal(idx.rows[0].ok, true);
});

test('migrate is safe from many callers at once', { skip: skipDb }, async () => {
  const schema = `ts_recv_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  schemas.push(schema);
  await Promise.all(Array.from({ length: 6 }, () => createReceiver(pool, { schema }).migrate()));
  assert.equal(Number((await pool.query(`SELECT count(*) AS n FROM "${schema}".records`)).rows[0].n), 0);
});
