// CommonJS consumers: require('@drainer/client') and
// require('@drainer/client/receiver') load the library (the exports map's
// "require" condition), typed by the CommonJS declarations (this file is
// type-checked as CommonJS), and they are the very module `import` loads:
// one implementation, so error classes, instanceof and the step of
// withAgentStep are shared by the two. No database needed.

import assert = require('node:assert/strict');
import nodeTest = require('node:test');
import drainer = require('@drainer/client');
import receiver = require('@drainer/client/receiver');

const { test } = nodeTest;

const tuple: drainer.Tuple = { agentRunId: 'run-1', stepId: 'step-1', toolName: 'charge_card', businessScope: '' };

test('require(@drainer/client) gives the library, typed', () => {
  assert.equal(drainer.idempotencyKey(tuple), 'idem_v1_74fc554617a5718b74629499dc5694a3');
  assert.equal(typeof drainer.enqueue, 'function');
  assert.throws(() => drainer.serializePayload({ n: 1n }), drainer.PayloadError);
  assert.equal(typeof receiver.createReceiver, 'function');
  assert.equal(typeof receiver.currentClient, 'function');
});

test('require and import load one implementation', async () => {
  const esm = await import('@drainer/client');
  const esmReceiver = await import('@drainer/client/receiver');
  for (const name of Object.keys(esm) as Array<keyof typeof esm>) {
    assert.equal(esm[name], drainer[name], `import and require differ on ${name}`);
  }
  const exported = Object.keys(drainer).filter((n) => n !== '__esModule').sort();
  assert.deepEqual(Object.keys(esm).sort(), exported, 'the ES module entry exports every name of the CommonJS one');
  assert.deepEqual(Object.keys(esmReceiver).sort(), Object.keys(receiver).filter((n) => n !== '__esModule').sort());
  assert.equal(esmReceiver.createReceiver, receiver.createReceiver);

  // An error thrown by the required module is an instance of the imported class.
  assert.throws(() => drainer.serializePayload(Symbol('s')), esm.PayloadError);
  // A step opened through require is the step a wrapped tool from import runs in.
  const client = { query: async () => ({ rows: [{ key: 'k', created: true }] }), getTransactionStatus: () => 'T' };
  const seen = await drainer.withAgentStep(client, { agentRunId: 'run-1', stepId: 'step-1' }, async () => esm.currentAgentStep());
  assert.equal(seen?.agentRunId, 'run-1');
});
