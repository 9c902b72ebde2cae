// Payload rules, options, errors and the tool wrapper against a recording
// fake client: everything that must be refused before the database is
// touched. No database needed.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  ConnectionClosedError,
  DrainerError,
  InvalidTupleError,
  JSONString,
  PayloadError,
  PayloadTooLargeError,
  UsageError,
  WaitTimeoutError,
  currentAgentStep,
  enqueue,
  idempotencyKey,
  isParked,
  isPayloadMismatch,
  isTerminal,
  outboxTool,
  result,
  serializePayload,
  waitFor,
  withAgentStep,
  type Queryable,
  type Tuple,
} from '@drainer/client';

/** A client that records its queries and answers from a script. */
class FakeClient implements Queryable {
  calls: Array<{ text: string; values: unknown[] }> = [];
  txStatus: string | null = 'T';
  constructor(private readonly answer: (text: string, values: unknown[]) => unknown[] | Error = () => []) {}
  async query(text: string, values: unknown[] = []): Promise<{ rows: unknown[] }> {
    this.calls.push({ text, values });
    const a = this.answer(text, values);
    if (a instanceof Error) throw a;
    return { rows: a };
  }
  getTransactionStatus(): string | null {
    return this.txStatus;
  }
}

const tuple: Tuple = { agentRunId: 'run-1', stepId: 'step-1', toolName: 'charge_card', businessScope: 'invoice:1' };

function enqueueAnswer(text: string, values: unknown[]): unknown[] {
  assert.match(text, /\.enqueue\(/);
  const [agentRunId, stepId, toolName, businessScope] = values as string[];
  return [{ key: idempotencyKey({ agentRunId: agentRunId!, stepId: stepId!, toolName: toolName!, businessScope: businessScope! }), created: true }];
}

test('enqueue sends the tuple and compact JSON to drainer.enqueue, schema quoted', async () => {
  const c = new FakeClient(enqueueAnswer);
  const res = await enqueue(c, tuple, { amount: 500, currency: 'EUR', when: new Date(0), nested: [1, 'two', null, true] });
  assert.deepEqual(res, { key: idempotencyKey(tuple), created: true });
  assert.equal(c.calls.length, 1);
  const call = c.calls[0]!;
  assert.equal(call.text, 'SELECT e.key, e.created FROM "drainer".enqueue($1::text, $2::text, $3::text, $4::text, $5::jsonb) AS e');
  assert.deepEqual(call.values, [
    'run-1',
    'step-1',
    'charge_card',
    'invoice:1',
    '{"amount":500,"currency":"EUR","when":"1970-01-01T00:00:00.000Z","nested":[1,"two",null,true]}',
  ]);
});

test('enqueue passes a traceparent and a custom schema, quoted as an identifier', async () => {
  const c = new FakeClient(enqueueAnswer);
  await enqueue(c, tuple, {}, { schema: 'we"ird; DROP TABLE x', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
  assert.equal(
    c.calls[0]!.text,
    'SELECT e.key, e.created FROM "we""ird; DROP TABLE x".enqueue($1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::text) AS e',
  );
  assert.equal(c.calls[0]!.values[5], '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
});

test('an invalid tuple is refused before the database is touched', async () => {
  const c = new FakeClient(() => assert.fail('queried'));
  await assert.rejects(enqueue(c, { ...tuple, stepId: '' }, {}), (err: unknown) => {
    assert.ok(err instanceof InvalidTupleError);
    assert.ok(err instanceof DrainerError);
    assert.equal(err.field, 'stepId');
    return true;
  });
  await assert.rejects(enqueue(c, { ...tuple, toolName: 'x\u0000' }, {}), InvalidTupleError);
  await assert.rejects(enqueue(c, { ...tuple, businessScope: 'y'.repeat(1025) }, {}), InvalidTupleError);
  await assert.rejects(enqueue(c, { ...tuple, agentRunId: '\udfff' }, {}), InvalidTupleError);
  assert.equal(c.calls.length, 0);
});

test('payloads JSON cannot represent faithfully are refused, naming where', async () => {
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic['self'] = { back: cyclic };
  const cases: Array<[unknown, string, RegExp]> = [
    [10n, 'payload', /BigInt is not JSON-serialisable/],
    [{ amount: 10n }, 'payload.amount', /BigInt/],
    [{ items: [1, { big: 1n }] }, 'payload.items[1].big', /BigInt/],
    [cyclic, 'payload.self.back', /cycle/],
    [undefined, 'payload', /undefined is not JSON-serialisable/],
    [() => 1, 'payload', /function is not JSON-serialisable/],
    [{ cb: () => 1 }, 'payload.cb', /function/],
    [{ s: Symbol('x') }, 'payload.s', /symbol/],
    [[1, undefined], 'payload[1]', /undefined/],
    [{ n: NaN }, 'payload.n', /NaN is not representable/],
    [{ n: -Infinity }, 'payload.n', /-Infinity/],
    [{ m: new Map([[1, 2]]) }, 'payload.m', /a Map is not JSON-serialisable/],
    [{ s: new Set([1]) }, 'payload.s', /a Set is not JSON-serialisable/],
    [{ text: 'ok\ud800' }, 'payload.text', /string is not valid UTF-8: lone surrogate at index 2/],
    [{ 'bad\udc00key': 1 }, 'payload["bad\\udc00key"]', /key is not valid UTF-8/],
    [{ text: 'a\u0000b' }, 'payload.text', /NUL character at index 1, which Postgres jsonb cannot store/],
  ];
  const c = new FakeClient(() => assert.fail('queried'));
  for (const [payload, path, message] of cases) {
    await assert.rejects(enqueue(c, tuple, payload), (err: unknown) => {
      assert.ok(err instanceof PayloadError, `PayloadError for ${path}, got ${String(err)}`);
      assert.ok(err instanceof DrainerError);
      assert.equal(err.path, path);
      assert.match(err.message, message);
      return true;
    });
  }
  assert.equal(c.calls.length, 0);
});

test('payload error messages never contain payload values', async () => {
  const secret = 'card-4242-4242-4242-4242';
  const c = new FakeClient(() => assert.fail('queried'));
  for (const payload of [
    { card: secret, n: NaN },
    { card: secret, x: 1n },
    { card: secret + '\u0000' },
    { card: secret + '\ud800' },
    { card: secret, pad: 'x'.repeat(1 << 20) },
  ]) {
    await assert.rejects(enqueue(c, tuple, payload), (err: unknown) => {
      assert.ok(err instanceof PayloadError);
      assert.doesNotMatch(err.message, /4242/);
      return true;
    });
  }
});

test('JSON-compatible values serialise exactly as JSON.stringify', () => {
  const values: unknown[] = [
    {},
    [],
    null,
    0,
    -0,
    1e21,
    1e-7,
    true,
    false,
    [1, 'x', null, false],
    { a: undefined, b: 1 },
    { nested: { deep: [{ x: 'é\u2028\u007f🚀', y: '\u0001"\\' }] } },
    { date: new Date(1700000000000), buf: Buffer.from('hi'), num: new Number(3), str: new String('s'), bool: new Boolean(false) },
    { toJSON: () => ({ replaced: true }) },
    Object.assign(Object.create({ inherited: 1 }), { own: 2 }),
  ];
  for (const v of values) {
    assert.equal(serializePayload(v), JSON.stringify(v), `for ${JSON.stringify(v)}`);
  }
});

test('a string payload is refused, naming the mistake and JSONString; a JSONString is a deliberate JSON string', async () => {
  const c = new FakeClient(() => assert.fail('queried'));
  for (const payload of [JSON.stringify({ amount: 5 }), '', 'hello', new String('{"amount":5}')]) {
    await assert.rejects(enqueue(c, tuple, payload), (err: unknown) => {
      assert.ok(err instanceof PayloadError, `PayloadError, got ${String(err)}`);
      assert.equal(err.path, 'payload');
      assert.match(err.message, /^payload: is a string: pass the object itself/);
      assert.match(err.message, /JSON\.stringify\(obj\)/);
      assert.match(err.message, /JSON\.parse\(text\)/);
      assert.match(err.message, /new JSONString\(value\)/);
      assert.doesNotMatch(err.message, /amount/); // never the value
      return true;
    });
    assert.throws(() => serializePayload(payload), PayloadError);
  }
  assert.equal(c.calls.length, 0);

  // The deliberate string: its value is the string itself, not JSON text.
  const sent = new FakeClient(enqueueAnswer);
  const cases: Array<[unknown, string]> = [
    [new JSONString('hello'), '"hello"'],
    [new JSONString('{"amount":5}'), '"{\\"amount\\":5}"'],
    [new JSONString(''), '""'],
    // Inside a payload a JSONString is the plain string; strings there were always fine.
    [{ note: new JSONString('hi'), plain: 'hi', list: ['x', new JSONString('y')] }, '{"note":"hi","plain":"hi","list":["x","y"]}'],
    // Everything else as before.
    [{ amount: 5 }, '{"amount":5}'],
    [[1, 'two', null], '[1,"two",null]'],
    [42, '42'],
    [-1.5, '-1.5'],
    [true, 'true'],
    [false, 'false'],
    [null, 'null'],
    [{}, '{}'],
    [[], '[]'],
  ];
  for (const [payload, json] of cases) {
    await enqueue(sent, tuple, payload);
    assert.equal(sent.calls.at(-1)!.values[4], json, `for ${String(json)}`);
    assert.equal(serializePayload(payload), json);
  }
  assert.equal(JSON.stringify(new JSONString('hello')), '"hello"');
  assert.equal(new JSONString('v').value, 'v');
  assert.ok(Object.isFrozen(new JSONString('v')));
  assert.throws(() => new JSONString(5 as unknown as string), /JSONString holds a string, not a number/);
  // A JSONString's string is checked like any other.
  assert.throws(() => serializePayload(new JSONString('a\u0000b')), (err: unknown) => err instanceof PayloadError && /NUL/.test(err.message));
});

test('a Date becomes its toISOString() text: UTC, milliseconds, YYYY-MM-DDTHH:MM:SS.sssZ', () => {
  // The same instant however it was built: local time zone and offsets do not show.
  const instant = new Date(Date.UTC(2024, 1, 29, 23, 5, 9, 7));
  const fromOffset = new Date('2024-03-01T01:05:09.007+02:00');
  const fromTZ = new Date(2024, 1, 29, 23, 5, 9, 7); // local time: TZ-dependent instant
  const text = '"2024-02-29T23:05:09.007Z"';
  assert.equal(serializePayload(instant), text);
  assert.equal(serializePayload(fromOffset), text);
  assert.equal(serializePayload(fromTZ), JSON.stringify(fromTZ.toISOString()));
  assert.match(serializePayload(fromTZ), /^"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z"$/);
  assert.equal(
    serializePayload({ at: new Date(0), list: [new Date(1700000000123)], nested: { d: new Date(-1) } }),
    '{"at":"1970-01-01T00:00:00.000Z","list":["2023-11-14T22:13:20.123Z"],"nested":{"d":"1969-12-31T23:59:59.999Z"}}',
  );
  // Whole seconds keep their ".000"; years past 9999 take toISOString's expanded form.
  assert.equal(serializePayload(new Date(Date.UTC(2030, 0, 1))), '"2030-01-01T00:00:00.000Z"');
  assert.equal(serializePayload(new Date(Date.UTC(10000, 0, 1))), '"+010000-01-01T00:00:00.000Z"');
  for (const d of [instant, new Date(0), new Date(8.64e15), new Date(-8.64e15)]) {
    assert.equal(serializePayload({ d }), JSON.stringify({ d }));
  }
});

test('an invalid Date is refused with PayloadError naming where, not written as null', async () => {
  // JSON.stringify writes null for it: the intent would lose the value silently.
  assert.equal(JSON.stringify({ at: new Date(NaN) }), '{"at":null}');
  const c = new FakeClient(() => assert.fail('queried'));
  const cases: Array<[unknown, string]> = [
    [new Date(NaN), 'payload'],
    [{ at: new Date('not a date') }, 'payload.at'],
    [{ items: [new Date(0), new Date(8.64e15 + 1)] }, 'payload.items[1]'],
  ];
  for (const [payload, path] of cases) {
    assert.throws(() => serializePayload(payload), PayloadError);
    await assert.rejects(enqueue(c, tuple, payload), (err: unknown) => {
      assert.ok(err instanceof PayloadError, `PayloadError for ${path}, got ${String(err)}`);
      assert.equal(err.path, path);
      assert.equal(err.message, `${path}: is an invalid Date (its time is NaN): it has no ISO text, and JSON.stringify would write null`);
      return true;
    });
  }
  assert.equal(c.calls.length, 0);
});

test('oversized payloads are refused before the database with PayloadTooLargeError', async () => {
  const c = new FakeClient(() => assert.fail('queried'));
  const big = { blob: 'x'.repeat(1 << 20) }; // 1 MiB of text plus the JSON around it
  await assert.rejects(enqueue(c, tuple, big), (err: unknown) => {
    assert.ok(err instanceof PayloadTooLargeError);
    assert.ok(err instanceof PayloadError);
    assert.equal(err.code, '54000');
    assert.equal(err.limit, 1 << 20);
    assert.equal(err.bytes, (1 << 20) + '{"blob":""}'.length);
    assert.match(err.message, /more than the limit of 1048576/);
    return true;
  });
  // Exactly at the limit passes the library's check.
  const atLimit = { b: 'y'.repeat((1 << 20) - '{"b":""}'.length) };
  assert.equal(Buffer.byteLength(serializePayload(atLimit)), 1 << 20);
  await assert.rejects(enqueue(c, tuple, { b: 'é'.repeat(10) }, { maxPayloadBytes: 20 }), PayloadTooLargeError);
  await assert.rejects(enqueue(c, tuple, {}, { maxPayloadBytes: 0 }), UsageError);
  assert.equal(c.calls.length, 0);
});

test('invalid schema names are refused before the database', async () => {
  const c = new FakeClient(() => assert.fail('queried'));
  for (const schema of ['', 'a\u0000b', 'x'.repeat(64)]) {
    await assert.rejects(enqueue(c, tuple, {}, { schema }), UsageError);
    await assert.rejects(result(c, 'idem_v1_00', { schema }), UsageError);
  }
  assert.equal(c.calls.length, 0);
});

test('node-postgres connection errors become ConnectionClosedError; other errors pass through', async () => {
  for (const message of [
    'Client was closed and is not queryable',
    'Client has encountered a connection error and is not queryable',
    'Connection terminated unexpectedly',
    'Cannot use a pool after calling end on the pool',
  ]) {
    const c = new FakeClient(() => new Error(message));
    await assert.rejects(enqueue(c, tuple, {}), (err: unknown) => {
      assert.ok(err instanceof ConnectionClosedError);
      assert.ok(err.message.startsWith('enqueue: the database connection is closed'));
      assert.equal((err.cause as Error).message, message);
      return true;
    });
    await assert.rejects(result(c, 'k'), ConnectionClosedError);
  }
  const mismatch = Object.assign(new Error('drainer.enqueue: key idem_v1_x already enqueued with a different payload'), { code: '23505' });
  const c = new FakeClient(() => mismatch);
  await assert.rejects(enqueue(c, tuple, {}), (err: unknown) => {
    assert.equal(err, mismatch);
    assert.ok(isPayloadMismatch(err));
    return true;
  });
  assert.equal(isPayloadMismatch(Object.assign(new Error('duplicate key value violates unique constraint "t_pkey"'), { code: '23505' })), false);
});

test("the database's payload limit (54000) becomes PayloadTooLargeError", async () => {
  const dbErr = Object.assign(
    new Error('drainer.enqueue: payload is 2000 bytes, more than the limit of 1000 (setting drainer.max_payload_bytes)'),
    { code: '54000' },
  );
  const c = new FakeClient(() => dbErr);
  await assert.rejects(enqueue(c, tuple, { a: 1 }), (err: unknown) => {
    assert.ok(err instanceof PayloadTooLargeError);
    assert.equal(err.bytes, 2000);
    assert.equal(err.limit, 1000);
    assert.equal(err.cause, dbErr);
    return true;
  });
});

test('result parses the response text and maps columns', async () => {
  const c = new FakeClient(() => [{ status: 'succeeded', response: '{"id":"x","n":[1,2]}', last_error: null }]);
  assert.deepEqual(await result(c, 'idem_v1_k'), { status: 'succeeded', response: { id: 'x', n: [1, 2] }, lastError: null });
  assert.equal(c.calls[0]!.text, 'SELECT r.status, r.response::text AS response, r.last_error FROM "drainer".result($1::text) AS r');
  assert.deepEqual(c.calls[0]!.values, ['idem_v1_k']);
  assert.equal(await result(new FakeClient(() => []), 'idem_v1_k'), null);
  await assert.rejects(result(c, ''), UsageError);
});

test('statuses: terminal and parked', () => {
  for (const s of ['succeeded', 'failed', 'compensated', 'cancelled']) assert.ok(isTerminal(s) && !isParked(s), s);
  for (const s of ['outcome_unknown', 'compensation_failed']) assert.ok(isParked(s) && !isTerminal(s), s);
  for (const s of ['pending', 'in_flight']) assert.ok(!isParked(s) && !isTerminal(s), s);
});

test('waitFor polls until terminal or parked', async () => {
  for (const final of ['succeeded', 'failed', 'compensated', 'cancelled', 'outcome_unknown', 'compensation_failed']) {
    const script = [[], [{ status: 'pending', response: null, last_error: null }], [{ status: 'in_flight', response: null, last_error: null }], [{ status: final, response: null, last_error: 'e' }]];
    let i = 0;
    const c = new FakeClient(() => script[Math.min(i++, script.length - 1)]!);
    c.txStatus = 'I';
    const r = await waitFor(c, 'idem_v1_k', { timeoutMs: 60_000, minPollMs: 1, maxPollMs: 2 });
    assert.deepEqual(r, { status: final, response: null, lastError: 'e' });
    assert.equal(c.calls.length, 4);
  }
});

test('waitFor gives up with WaitTimeoutError carrying the last status', async () => {
  const c = new FakeClient(() => [{ status: 'pending', response: null, last_error: null }]);
  c.txStatus = 'I';
  await assert.rejects(waitFor(c, 'idem_v1_k', { timeoutMs: 30, minPollMs: 5, maxPollMs: 10 }), (err: unknown) => {
    assert.ok(err instanceof WaitTimeoutError);
    assert.ok(err instanceof DrainerError);
    assert.equal(err.key, 'idem_v1_k');
    assert.equal(err.timeoutMs, 30);
    assert.equal(err.lastStatus, 'pending');
    assert.match(err.message, /still pending after 30 ms/);
    return true;
  });
  assert.ok(c.calls.length >= 1, 'read at least once');
  // A read that overruns the deadline is not the last look: one more
  // begins at or after it.
  const began: number[] = [];
  const slow = new FakeClient(() => [{ status: 'pending', response: null, last_error: null }]);
  slow.txStatus = 'I';
  const query = slow.query.bind(slow);
  slow.query = async (text: string, values: unknown[] = []) => {
    began.push(performance.now());
    await new Promise((resolve) => setTimeout(resolve, 50));
    return query(text, values);
  };
  const t0 = performance.now();
  await assert.rejects(waitFor(slow, 'idem_v1_k', { timeoutMs: 30, minPollMs: 5, maxPollMs: 10 }), WaitTimeoutError);
  assert.ok(began.length >= 2 && began[began.length - 1]! >= t0 + 30, `reads began at ${began.map((b) => (b - t0).toFixed(1)).join(', ')} ms; the last must begin at or after the 30 ms deadline`);
  const none = new FakeClient(() => []);
  none.txStatus = null;
  await assert.rejects(waitFor(none, 'idem_v1_k', { timeoutMs: 0 }), (err: unknown) => err instanceof WaitTimeoutError && err.lastStatus === null && /no row with this key/.test(err.message));
});

test('waitFor refuses a client inside a transaction and bad options', async () => {
  const c = new FakeClient(() => assert.fail('queried'));
  for (const s of ['T', 'E']) {
    c.txStatus = s;
    await assert.rejects(waitFor(c, 'idem_v1_k'), (err: unknown) => err instanceof UsageError && /inside a transaction/.test(err.message));
  }
  c.txStatus = 'I';
  await assert.rejects(waitFor(c, 'idem_v1_k', { timeoutMs: -1 }), UsageError);
  await assert.rejects(waitFor(c, 'idem_v1_k', { timeoutMs: NaN }), UsageError);
  await assert.rejects(waitFor(c, 'idem_v1_k', { minPollMs: 10, maxPollMs: 5 }), UsageError);
  assert.equal(c.calls.length, 0);
});

test('outboxTool enqueues its call with the step tuple instead of running', async () => {
  const c = new FakeClient(enqueueAnswer);
  const charge = outboxTool<{ invoiceId: string; amount: number }>('charge_card', { scope: (a) => `invoice:${a.invoiceId}` });
  assert.equal(charge.toolName, 'charge_card');
  const key = await withAgentStep(c, { agentRunId: 'run-9', stepId: 'charge' }, async () => {
    assert.deepEqual(currentAgentStep(), { agentRunId: 'run-9', stepId: 'charge' });
    await Promise.resolve();
    return charge({ invoiceId: 'inv_1', amount: 500 });
  });
  assert.equal(key, idempotencyKey({ agentRunId: 'run-9', stepId: 'charge', toolName: 'charge_card', businessScope: 'invoice:inv_1' }));
  assert.deepEqual(c.calls[0]!.values, ['run-9', 'charge', 'charge_card', 'invoice:inv_1', '{"invoiceId":"inv_1","amount":500}']);
  assert.equal(currentAgentStep(), undefined);
});

test('outboxTool refuses misuse without touching the database', async () => {
  const c = new FakeClient(() => assert.fail('queried'));
  const tool = outboxTool<Record<string, unknown>>('send_email');
  await assert.rejects(tool({ to: 'a' }), (err: unknown) => err instanceof UsageError && /outside withAgentStep/.test(err.message));
  await withAgentStep(c, { agentRunId: 'r', stepId: 's' }, async () => {
    await assert.rejects(tool([1, 2] as unknown as Record<string, unknown>), PayloadError);
    await assert.rejects(tool('x' as unknown as Record<string, unknown>), PayloadError);
    await assert.rejects(tool({ n: 1n }), PayloadError);
    c.txStatus = 'I';
    await assert.rejects(tool({}), (err: unknown) => err instanceof UsageError && /not inside a transaction/.test(err.message));
    c.txStatus = 'E';
    await assert.rejects(tool({}), (err: unknown) => err instanceof UsageError && /has failed/.test(err.message));
  });
  const scoped = outboxTool<{ id: string }>('send_email', { scope: (a) => a.id });
  c.txStatus = 'T';
  await withAgentStep(c, { agentRunId: 'r', stepId: 's' }, async () => {
    await assert.rejects(scoped({ id: 'x'.repeat(2000) }), (err: unknown) => err instanceof InvalidTupleError && err.field === 'businessScope');
    await assert.rejects(scoped({ id: 7 as unknown as string }), (err: unknown) => err instanceof InvalidTupleError && err.field === 'businessScope');
  });
  assert.throws(() => outboxTool(''), (err: unknown) => err instanceof InvalidTupleError && err.field === 'toolName');
  await assert.rejects(withAgentStep(c, { agentRunId: '', stepId: 's' }, () => 1), (err: unknown) => err instanceof InvalidTupleError && err.field === 'agentRunId');
  const pool = { query: async () => ({ rows: [] }), connect: async () => undefined, totalCount: 0, idleCount: 0 };
  await assert.rejects(withAgentStep(pool, { agentRunId: 'r', stepId: 's' }, () => 1), (err: unknown) => err instanceof UsageError && /Pool/.test(err.message));
  assert.equal(c.calls.length, 0);
});

test('requireTransaction: false lets a wrapped tool enqueue outside a transaction', async () => {
  const c = new FakeClient(enqueueAnswer);
  c.txStatus = 'I';
  const tool = outboxTool<{ a: number }>('noop');
  const key = await withAgentStep(c, { agentRunId: 'r', stepId: 's', requireTransaction: false, schema: 'other' }, () => tool({ a: 1 }));
  assert.match(key, /^idem_v1_/);
  assert.match(c.calls[0]!.text, /FROM "other"\.enqueue/);
});
