// The key function against the shared vectors (docs/reference.md §1), and the
// tuple rules of enqueue. No database needed.

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  InvalidTupleError,
  KEY_PREFIX,
  canonicalTuple,
  encodedTuple,
  idempotencyKey,
  validateTuple,
  type Tuple,
} from '@drainer/client';

// Compiled to dist/test/: the package is two levels up, the repository four.
const repoVectors = new URL('../../../../idemkey/testdata/key-vectors.json', import.meta.url);
const sharedVectors = new URL('../../../../../shared/key-vectors.json', import.meta.url);

interface Vector {
  agent_run_id: string;
  step_id: string;
  tool_name: string;
  business_scope: string;
  canonical: string;
  key: string;
}

function loadVectors(url: URL): Vector[] {
  const doc = JSON.parse(readFileSync(url, 'utf8')) as { vectors: Vector[] };
  return doc.vectors;
}

function tupleOf(v: Vector): Tuple {
  return { agentRunId: v.agent_run_id, stepId: v.step_id, toolName: v.tool_name, businessScope: v.business_scope };
}

test('reproduces every key vector of idemkey/testdata/key-vectors.json', () => {
  const vectors = loadVectors(repoVectors);
  assert.ok(vectors.length >= 8, `only ${vectors.length} vectors`);
  assert.ok(
    vectors.some((v) => v.agent_run_id === '' && v.step_id === '' && v.tool_name === '' && v.business_scope === ''),
    'the all-empty tuple is among the vectors',
  );
  for (const v of vectors) {
    const t = tupleOf(v);
    assert.equal(canonicalTuple(t), v.canonical, `canonical of ${JSON.stringify(t)}`);
    assert.equal(idempotencyKey(t), v.key, `key of ${JSON.stringify(t)}`);
    assert.equal(Buffer.from(encodedTuple(t), 'base64url').toString('utf8'), v.canonical);
    assert.doesNotMatch(encodedTuple(t), /[=+/]/, 'unpadded base64url');
  }
});

test('the repository copy of the vectors equals the shared one', (t) => {
  if (!existsSync(sharedVectors)) {
    t.diagnostic(`no ${sharedVectors.pathname} in this checkout: compared the repository copy only`);
    return;
  }
  assert.deepEqual(loadVectors(sharedVectors), loadVectors(repoVectors));
  assert.equal(readFileSync(sharedVectors, 'utf8'), readFileSync(repoVectors, 'utf8'));
});

test('keys have the contract shape', () => {
  const k = idempotencyKey({ agentRunId: 'r', stepId: 's', toolName: 't', businessScope: '' });
  assert.match(k, /^idem_v1_[0-9a-f]{32}$/);
  assert.ok(k.startsWith(KEY_PREFIX));
});

test('JCS escaping: controls, DEL, U+2028, quotes and backslashes', () => {
  const t: Tuple = {
    agentRunId: '\u0000\u0007\b\f\n\r\t\u001f',
    stepId: '\u007f\u2028\u2029é🚀',
    toolName: '"\\/',
    businessScope: '',
  };
  assert.equal(
    canonicalTuple(t),
    '{"agent_run_id":"\\u0000\\u0007\\b\\f\\n\\r\\t\\u001f","business_scope":"","step_id":"\u007f\u2028\u2029é🚀","tool_name":"\\"\\\\/"}',
  );
});

test('lone surrogates: the key is defined (\\udxxx escape) and distinct; validation refuses them', () => {
  const lone: Tuple = { agentRunId: 'run\ud800', stepId: 's', toolName: 't', businessScope: '' };
  assert.equal(canonicalTuple(lone), '{"agent_run_id":"run\\ud800","business_scope":"","step_id":"s","tool_name":"t"}');
  // Not the key of the replacement character nor of the escape's text.
  assert.notEqual(idempotencyKey(lone), idempotencyKey({ ...lone, agentRunId: 'run\ufffd' }));
  assert.notEqual(idempotencyKey(lone), idempotencyKey({ ...lone, agentRunId: 'run\\ud800' }));
  assert.throws(() => validateTuple(lone), (err: unknown) => {
    assert.ok(err instanceof InvalidTupleError);
    assert.equal(err.field, 'agentRunId');
    assert.match(err.message, /agentRunId is not valid UTF-8: lone surrogate U\+D800 at index 3/);
    return true;
  });
});

test('idempotencyKey accepts any strings but not non-strings', () => {
  assert.doesNotThrow(() => idempotencyKey({ agentRunId: '', stepId: '\u0000', toolName: 'x'.repeat(5000), businessScope: '\udc00' }));
  assert.throws(
    () => idempotencyKey({ agentRunId: 'r', stepId: 1, toolName: 't' } as unknown as Tuple),
    (err: unknown) => err instanceof InvalidTupleError && err.field === 'stepId' && /businessScope must be a string, not undefined/.test(err.message),
  );
});

function problemOf(t: Tuple): { field: string; message: string } | undefined {
  try {
    validateTuple(t);
    return undefined;
  } catch (err) {
    assert.ok(err instanceof InvalidTupleError, `InvalidTupleError, got ${String(err)}`);
    return { field: err.field, message: err.message };
  }
}

const ok: Tuple = { agentRunId: 'run-1', stepId: 'step-1', toolName: 'charge_card', businessScope: 'invoice:1' };

test('validateTuple accepts valid tuples, an empty scope and 1024-byte fields', () => {
  assert.equal(problemOf(ok), undefined);
  assert.equal(problemOf({ ...ok, businessScope: '' }), undefined);
  assert.equal(problemOf({ ...ok, stepId: 'é'.repeat(512) }), undefined); // 1024 bytes
  assert.equal(problemOf({ ...ok, businessScope: '🚀'.repeat(256) }), undefined); // 1024 bytes
});

test('validateTuple names the field and what is wrong', () => {
  const cases: Array<[Partial<Record<keyof Tuple, unknown>>, string, RegExp]> = [
    [{ agentRunId: '' }, 'agentRunId', /agentRunId must not be empty/],
    [{ stepId: '' }, 'stepId', /stepId must not be empty/],
    [{ toolName: '' }, 'toolName', /toolName must not be empty/],
    [{ toolName: 'a\u0000b' }, 'toolName', /toolName contains a NUL character at index 1/],
    [{ businessScope: '\u0000' }, 'businessScope', /businessScope contains a NUL character/],
    [{ stepId: 'x'.repeat(1025) }, 'stepId', /stepId is 1025 bytes in UTF-8, more than the limit of 1024/],
    [{ businessScope: 'é'.repeat(513) }, 'businessScope', /businessScope is 1026 bytes/],
    [{ stepId: 'a\udc00b' }, 'stepId', /stepId is not valid UTF-8: lone surrogate U\+DC00 at index 1/],
    [{ businessScope: '\ud83d' }, 'businessScope', /lone surrogate U\+D83D at index 0/],
    [{ agentRunId: 42 }, 'agentRunId', /agentRunId must be a string, not a number/],
    [{ businessScope: undefined }, 'businessScope', /businessScope must be a string, not undefined/],
    [{ toolName: null }, 'toolName', /toolName must be a string, not null/],
  ];
  for (const [patch, field, message] of cases) {
    const p = problemOf({ ...ok, ...patch } as Tuple);
    assert.ok(p, `no error for ${JSON.stringify(patch)}`);
    assert.equal(p.field, field);
    assert.match(p.message, message);
  }
});

test('validateTuple reports every invalid field at once', () => {
  try {
    validateTuple({ agentRunId: '', stepId: '', toolName: 'ok', businessScope: '\u0000' });
    assert.fail('no error');
  } catch (err) {
    assert.ok(err instanceof InvalidTupleError);
    assert.equal(err.field, 'agentRunId');
    assert.deepEqual(
      err.problems.map((p) => p.field),
      ['agentRunId', 'stepId', 'businessScope'],
    );
    assert.match(err.message, /^invalid intent tuple: agentRunId must not be empty; stepId must not be empty; businessScope contains/);
  }
});
