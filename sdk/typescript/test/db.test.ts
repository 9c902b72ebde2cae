// Against a real database migrated by `drainer migrate`, and (for the
// outcome tests) a running `drainer run` that dispatches to the mock
// provider. integration/sdk_typescript_test.go sets all of this up:
//
//   DRAINER_TEST_DATABASE_URL  the migrated database (tests skipped without it)
//   DRAINER_TEST_SCHEMA        drainer's schema in it (default drainer)
//   DRAINER_TEST_DAEMON=1      a daemon routes these tools (outcome tests skipped without it):
//     ts_charge_card, ts_send_email  → the mock provider: 200 with {id, tool, received}
//     ts_refused                     → the mock provider, which answers 422: failed
//     ts_unsure (non_idempotent)     → a provider that always answers 503: outcome_unknown
//   ts_unrouted has no route: its rows stay pending (in_flight for a moment
//   whenever the daemon looks at them again).

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test, type TestContext } from 'node:test';

import pg from 'pg';

import {
  ConnectionClosedError,
  PayloadTooLargeError,
  UsageError,
  WaitTimeoutError,
  enqueue,
  idempotencyKey,
  isPayloadMismatch,
  outboxTool,
  result,
  waitFor,
  withAgentStep,
  type Tuple,
} from '@drainer/client';

const url = process.env['DRAINER_TEST_DATABASE_URL'] ?? '';
const schema = process.env['DRAINER_TEST_SCHEMA'] || 'drainer';
const skipDb = url === '' ? 'DRAINER_TEST_DATABASE_URL is not set (a database migrated by drainer migrate)' : false;
const skipDaemon =
  skipDb ||
  (process.env['DRAINER_TEST_DAEMON'] === '1'
    ? false
    : 'DRAINER_TEST_DAEMON=1 is not set (a drainer run routing the ts_* tools; integration/sdk_typescript_test.go starts one)');

// Generous bound for an outcome: the daemon dispatches within a second or two.
const OUTCOME_TIMEOUT_MS = 90_000;

const tag = randomUUID().replaceAll('-', '').slice(0, 12);
const table = `ts_sdk_invoices_${tag}`;
const q = (name: string) => '"' + name.replaceAll('"', '""') + '"';
const outbox = `${q(schema)}.outbox`;
const opts = { schema };

let pool!: pg.Pool;

function run(name: string): string {
  return `ts-${tag}-${name}`;
}

async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {}); // a connection terminated by a test surfaces on the next query
  await c.connect();
  return c;
}

/** Runs fn in BEGIN … COMMIT on a fresh client (ROLLBACK when it throws). */
async function inTransaction<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = await connect();
  try {
    await c.query('BEGIN');
    try {
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (err) {
      await c.query('ROLLBACK');
      throw err;
    }
  } finally {
    await c.end();
  }
}

async function outboxRows(key: string): Promise<Array<Record<string, unknown>>> {
  const res = await pool.query(
    `SELECT agent_run_id, step_id, tool_name, business_scope, kind, payload FROM ${outbox} WHERE key = $1`,
    [key],
  );
  return res.rows;
}

async function invoiceState(id: string): Promise<string | undefined> {
  const res = await pool.query(`SELECT state FROM ${q(table)} WHERE id = $1`, [id]);
  return res.rows[0]?.state;
}

// Each test is skipped on its own (not a whole suite), so that node's
// summary counts the skips and the Go driver can refuse them.
function dbTest(name: string, fn: (t: TestContext) => Promise<void>): void {
  test(name, { skip: skipDb }, fn);
}
function daemonTest(name: string, fn: (t: TestContext) => Promise<void>): void {
  test(name, { skip: skipDaemon }, fn);
}

before(async () => {
  if (skipDb) return;
  pool = new pg.Pool({ connectionString: url, max: 4 });
  await pool.query(`CREATE TABLE ${q(table)} (id text PRIMARY KEY, state text NOT NULL)`);
});
after(async () => {
  if (pool) {
    await pool.query(`DROP TABLE IF EXISTS ${q(table)}`);
    await pool.end();
  }
});

dbTest("enqueue commits with the agent's own write in one transaction", async () => {
  const tuple: Tuple = { agentRunId: run('commit'), stepId: 'charge', toolName: 'ts_unrouted', businessScope: 'invoice:inv_1' };
  const payload = { amount_cents: 500, currency: 'EUR', lines: [{ sku: 'A-1', qty: 2 }], note: 'é 🚀 \u2028' };
  const res = await inTransaction(async (c) => {
    await c.query(`INSERT INTO ${q(table)} (id, state) VALUES ($1, 'charging')`, ['inv_1']);
    const r = await enqueue(c, tuple, payload, opts);
    // Not visible to others before COMMIT.
    assert.equal(await result(pool, r.key, opts), null);
    return r;
  });
  assert.deepEqual(res, { key: idempotencyKey(tuple), created: true });
  assert.equal(await invoiceState('inv_1'), 'charging');
  assert.deepEqual(await outboxRows(res.key), [
    {
      agent_run_id: tuple.agentRunId,
      step_id: 'charge',
      tool_name: 'ts_unrouted',
      business_scope: 'invoice:inv_1',
      kind: 'forward',
      payload,
    },
  ]);
  // ts_unrouted has no route: a running daemon looks at the row now and
  // then (in_flight for a moment) and leaves it pending.
  const r = await result(pool, res.key, opts);
  assert.ok(r !== null && ['pending', 'in_flight'].includes(r.status), `status ${r?.status}`);
  assert.equal(r.response, null);
  // The key is the database's own.
  const sqlKey = await pool.query(`SELECT ${q(schema)}.idempotency_key($1, $2, $3, $4) AS k`, [
    tuple.agentRunId,
    tuple.stepId,
    tuple.toolName,
    tuple.businessScope,
  ]);
  assert.equal(sqlKey.rows[0].k, res.key);
});

dbTest('rollback leaves nothing: neither the write nor the intent', async () => {
  const tuple: Tuple = { agentRunId: run('rollback'), stepId: 'charge', toolName: 'ts_unrouted', businessScope: 'invoice:inv_2' };
  const c = await connect();
  let key: string;
  try {
    await c.query('BEGIN');
    await c.query(`INSERT INTO ${q(table)} (id, state) VALUES ($1, 'charging')`, ['inv_2']);
    const r = await enqueue(c, tuple, { amount_cents: 700 }, opts);
    assert.equal(r.created, true);
    assert.equal((await result(c, r.key, opts))?.status, 'pending', 'visible inside its own transaction');
    key = r.key;
    await c.query('ROLLBACK');
  } finally {
    await c.end();
  }
  assert.equal(await invoiceState('inv_2'), undefined);
  assert.equal(await result(pool, key, opts), null);
  assert.deepEqual(await outboxRows(key), []);
  // The step runs again: a fresh intent.
  const again = await inTransaction((c2) => enqueue(c2, tuple, { amount_cents: 700 }, opts));
  assert.deepEqual(again, { key, created: true });
});

dbTest('a retried step gets the existing key with created = false', async () => {
  const tuple: Tuple = { agentRunId: run('retry'), stepId: 'charge', toolName: 'ts_unrouted', businessScope: 'invoice:inv_3' };
  const step = (c: pg.Client, payload: object) =>
    c
      .query(`INSERT INTO ${q(table)} (id, state) VALUES ($1, 'charging') ON CONFLICT (id) DO NOTHING`, ['inv_3'])
      .then(() => enqueue(c, tuple, payload, opts));
  const first = await inTransaction((c) => step(c, { amount_cents: 900, currency: 'EUR' }));
  assert.equal(first.created, true);
  const second = await inTransaction((c) => step(c, { amount_cents: 900, currency: 'EUR' }));
  assert.deepEqual(second, { key: first.key, created: false });
  // Payload identity is jsonb equality: key order does not matter.
  const third = await inTransaction((c) => step(c, { currency: 'EUR', amount_cents: 900 }));
  assert.deepEqual(third, { key: first.key, created: false });
  const n = await pool.query(`SELECT count(*)::int AS n FROM ${outbox} WHERE agent_run_id = $1`, [tuple.agentRunId]);
  assert.equal(n.rows[0].n, 1);
});

dbTest("a different payload for the same tuple raises pg's 23505 naming the key", async () => {
  const tuple: Tuple = { agentRunId: run('mismatch'), stepId: 'charge', toolName: 'ts_unrouted', businessScope: 'invoice:inv_4' };
  const { key } = await inTransaction((c) => enqueue(c, tuple, { amount_cents: 100 }, opts));
  await assert.rejects(
    inTransaction((c) => enqueue(c, tuple, { amount_cents: 101 }, opts)),
    (err: unknown) => {
      assert.ok(err instanceof pg.DatabaseError, `pg DatabaseError, got ${String(err)}`);
      assert.equal(err.code, '23505');
      assert.ok(err.message.includes(key), err.message);
      assert.ok(isPayloadMismatch(err));
      return true;
    },
  );
  const rows = await outboxRows(key);
  assert.equal(rows.length, 1);
  assert.deepEqual(rows[0]!['payload'], { amount_cents: 100 });
});

dbTest('concurrent enqueues of one tuple: one creates, the other waits and gets created = false', async () => {
  const tuple: Tuple = { agentRunId: run('concurrent'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  const a = await connect();
  const b = await connect();
  try {
    await a.query('BEGIN');
    const first = await enqueue(a, tuple, { n: 1 }, opts);
    const second = enqueue(b, tuple, { n: 1 }, opts); // blocks on a's uncommitted row
    await a.query('COMMIT');
    assert.equal(first.created, true);
    assert.deepEqual(await second, { key: first.key, created: false });
  } finally {
    await a.end();
    await b.end();
  }
});

dbTest("the database's payload limit is surfaced as PayloadTooLargeError", async () => {
  const tuple: Tuple = { agentRunId: run('limit'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  await assert.rejects(
    inTransaction(async (c) => {
      await c.query("SET LOCAL drainer.max_payload_bytes = '64'");
      return enqueue(c, tuple, { blob: 'x'.repeat(100) }, opts);
    }),
    (err: unknown) => {
      assert.ok(err instanceof PayloadTooLargeError, String(err));
      assert.equal(err.code, '54000');
      assert.equal(err.limit, 64);
      assert.ok(err.bytes > 100);
      assert.ok(err.cause instanceof pg.DatabaseError);
      return true;
    },
  );
  // And the library's own limit refuses > 1 MiB before the database.
  await assert.rejects(enqueue(pool, tuple, { blob: 'x'.repeat(1 << 20) }, opts), PayloadTooLargeError);
  assert.equal(await result(pool, idempotencyKey(tuple), opts), null);
});

dbTest('a traceparent is stored with the intent', async () => {
  const tuple: Tuple = { agentRunId: run('trace'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const { key } = await inTransaction((c) => enqueue(c, tuple, {}, { ...opts, traceparent: tp }));
  const res = await pool.query(`SELECT traceparent FROM ${outbox} WHERE key = $1`, [key]);
  assert.equal(res.rows[0].traceparent, tp);
});

dbTest('an enqueue into an aborted run is cancelled, and waitFor returns at once', async () => {
  const agentRunId = run('aborted');
  await pool.query(`SELECT ${q(schema)}.abort_run($1, 'test')`, [agentRunId]);
  const tuple: Tuple = { agentRunId, stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  const { key, created } = await inTransaction((c) => enqueue(c, tuple, { x: 1 }, opts));
  assert.equal(created, true);
  const r = await waitFor(pool, key, { ...opts, timeoutMs: 10_000 });
  assert.equal(r.status, 'cancelled');
  assert.match(r.lastError ?? '', /run aborted/);
});

dbTest('waitFor times out with WaitTimeoutError on a row that stays pending', async () => {
  const tuple: Tuple = { agentRunId: run('timeout'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  const { key } = await inTransaction((c) => enqueue(c, tuple, { x: 1 }, opts));
  await assert.rejects(waitFor(pool, key, { ...opts, timeoutMs: 300 }), (err: unknown) => {
    assert.ok(err instanceof WaitTimeoutError, String(err));
    assert.equal(err.key, key);
    assert.ok(err.lastStatus === 'pending' || err.lastStatus === 'in_flight', `last status ${err.lastStatus}`);
    return true;
  });
  await assert.rejects(
    waitFor(pool, 'idem_v1_00000000000000000000000000000000', { ...opts, timeoutMs: 100 }),
    (err: unknown) => err instanceof WaitTimeoutError && err.lastStatus === null,
  );
});

dbTest('waitFor refuses to wait inside the transaction that enqueued', async () => {
  const tuple: Tuple = { agentRunId: run('waitintx'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  const c = await connect();
  try {
    await c.query('BEGIN');
    const { key } = await enqueue(c, tuple, {}, opts);
    await assert.rejects(waitFor(c, key, { ...opts, timeoutMs: 1000 }), UsageError);
    await c.query('ROLLBACK');
  } finally {
    await c.end();
  }
});

dbTest('a closed client or pool raises ConnectionClosedError', async () => {
  const tuple: Tuple = { agentRunId: run('closed'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  const c = await connect();
  await c.end();
  await assert.rejects(enqueue(c, tuple, { x: 1 }, opts), ConnectionClosedError);
  await assert.rejects(result(c, idempotencyKey(tuple), opts), ConnectionClosedError);
  await assert.rejects(waitFor(c, idempotencyKey(tuple), { ...opts, timeoutMs: 1000 }), ConnectionClosedError);

  const p = new pg.Pool({ connectionString: url, max: 1 });
  await p.query('SELECT 1');
  await p.end();
  await assert.rejects(enqueue(p, tuple, { x: 1 }, opts), ConnectionClosedError);

  // A connection the server terminated.
  const killed = await connect();
  const pid = (await killed.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  const term = await pool.query('SELECT pg_terminate_backend($1, 10000) AS ok', [pid]);
  assert.equal(term.rows[0].ok, true);
  await assert.rejects(enqueue(killed, tuple, { x: 1 }, opts), ConnectionClosedError);
  await killed.end().catch(() => {});
  assert.equal(await result(pool, idempotencyKey(tuple), opts), null, 'nothing was written');
});

dbTest('an unknown schema surfaces the database error', async () => {
  const tuple: Tuple = { agentRunId: run('schema'), stepId: 's', toolName: 'ts_unrouted', businessScope: '' };
  await assert.rejects(enqueue(pool, tuple, {}, { schema: `no_such_schema_${tag}` }), (err: unknown) => {
    assert.ok(err instanceof pg.DatabaseError, String(err));
    assert.ok(err.code === '3F000' || err.code === '42883', `code ${err.code}`);
    return true;
  });
});

dbTest('a wrapped tool enqueues in the step transaction instead of running; rollback takes it back', async () => {
  const sendEmail = outboxTool<{ to: string; template: string; invoiceId: string }>('ts_unrouted', {
    scope: (a) => `invoice:${a.invoiceId}`,
    schema,
  });
  const agentRunId = run('wrapper-rollback');
  const key = await (async () => {
    const c = await connect();
    try {
      await c.query('BEGIN');
      const k = await withAgentStep(c, { agentRunId, stepId: 'notify' }, async () => {
        await c.query(`INSERT INTO ${q(table)} (id, state) VALUES ($1, 'notifying')`, ['inv_w1']);
        return sendEmail({ to: 'ap@example.com', template: 'receipt', invoiceId: 'inv_w1' });
      });
      await c.query('ROLLBACK');
      return k;
    } finally {
      await c.end();
    }
  })();
  assert.equal(key, idempotencyKey({ agentRunId, stepId: 'notify', toolName: 'ts_unrouted', businessScope: 'invoice:inv_w1' }));
  assert.equal(await invoiceState('inv_w1'), undefined);
  assert.deepEqual(await outboxRows(key), []);
});

daemonTest("waitFor returns the provider's response once the intent succeeded", async () => {
  const tuple: Tuple = { agentRunId: run('charge'), stepId: 'charge', toolName: 'ts_charge_card', businessScope: 'invoice:inv_5' };
  const payload = { amount_cents: 1250, currency: 'EUR', customer: 'cus_42', meta: { lines: [1, 2, 3], note: 'ünïcødé' } };
  const { key, created } = await inTransaction(async (c) => {
    await c.query(`INSERT INTO ${q(table)} (id, state) VALUES ($1, 'charging')`, ['inv_5']);
    return enqueue(c, tuple, payload, opts);
  });
  assert.equal(created, true);
  const c = await connect();
  try {
    const r = await waitFor(c, key, { ...opts, timeoutMs: OUTCOME_TIMEOUT_MS });
    assert.equal(r.status, 'succeeded', `last error: ${r.lastError}`);
    const response = r.response as { id: string; tool: string; received: unknown };
    assert.equal(response.tool, 'ts_charge_card');
    assert.deepEqual(response.received, payload);
    assert.match(response.id, /^mock_[0-9a-f]{24}$/);
    assert.deepEqual(await result(c, key, opts), r);
  } finally {
    await c.end();
  }
  // A retry of the step after dispatch is still the same intent.
  const again = await inTransaction((c2) => enqueue(c2, tuple, payload, opts));
  assert.deepEqual(again, { key, created: false });
});

daemonTest('a wrapped tool is dispatched with its arguments as the payload', async () => {
  const sendEmail = outboxTool<{ to: string; template: string; invoiceId: string }>('ts_send_email', {
    scope: (a) => `invoice:${a.invoiceId}`,
  });
  const agentRunId = run('wrapper');
  const args = { to: 'ap@example.com', template: 'receipt', invoiceId: 'inv_6' };
  const c = await connect();
  try {
    await c.query('BEGIN');
    const key = await withAgentStep(c, { agentRunId, stepId: 'notify', schema }, async () => {
      await c.query(`INSERT INTO ${q(table)} (id, state) VALUES ($1, 'notified')`, ['inv_6']);
      return sendEmail(args);
    });
    await c.query('COMMIT');
    assert.equal(key, idempotencyKey({ agentRunId, stepId: 'notify', toolName: 'ts_send_email', businessScope: 'invoice:inv_6' }));
    const rows = await outboxRows(key);
    assert.equal(rows.length, 1);
    assert.deepEqual(rows[0]!['payload'], args);
    const r = await waitFor(c, key, { ...opts, timeoutMs: OUTCOME_TIMEOUT_MS });
    assert.equal(r.status, 'succeeded', `last error: ${r.lastError}`);
    assert.deepEqual((r.response as { received: unknown }).received, args);
    assert.equal(await invoiceState('inv_6'), 'notified');
  } finally {
    await c.end();
  }
});

daemonTest('waitFor returns a terminal failure with its last error', async () => {
  const tuple: Tuple = { agentRunId: run('refused'), stepId: 's', toolName: 'ts_refused', businessScope: '' };
  const { key } = await inTransaction((c) => enqueue(c, tuple, { amount_cents: -1 }, opts));
  const r = await waitFor(pool, key, { ...opts, timeoutMs: OUTCOME_TIMEOUT_MS });
  assert.equal(r.status, 'failed');
  assert.equal(r.response, null);
  assert.match(r.lastError ?? '', /422/);
});

daemonTest('waitFor returns once a non_idempotent intent is parked as outcome_unknown', async () => {
  const tuple: Tuple = { agentRunId: run('unsure'), stepId: 's', toolName: 'ts_unsure', businessScope: '' };
  const { key } = await inTransaction((c) => enqueue(c, tuple, { amount_cents: 1 }, opts));
  const r = await waitFor(pool, key, { ...opts, timeoutMs: OUTCOME_TIMEOUT_MS });
  assert.equal(r.status, 'outcome_unknown', `last error: ${r.lastError}`);
  assert.equal(r.response, null);
});
