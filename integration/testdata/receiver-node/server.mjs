// An orders service behind @drainer/client/receiver (sdk/typescript, built),
// for integration/receiver_examples_test.go: a Node http server, node-postgres
// from the library's own dependencies.
//
//   DATABASE_URL=postgres://... node server.mjs MODE DELAY_MS
//
// Prints "listening on http://127.0.0.1:PORT" once it serves.
// POST /v1/orders (key required) answers 201 {"id": N, "order": BODY};
// GET /v1/orders/count answers {"count": N}.
import http from 'node:http';
import { createRequire } from 'node:module';

const sdk = new URL('../../../sdk/typescript/', import.meta.url);
const pg = createRequire(new URL('package.json', sdk))('pg');
const { createReceiver } = await import(new URL('dist/receiver.js', sdk).href);

const mode = process.argv[2] ?? 'seed';
const delayMs = Number(process.argv[3] ?? '0');
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
const rc = createReceiver(pool, { mode });
await rc.migrate();
await pool.query('CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, body jsonb NOT NULL)');

function answer(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

const handler = async (req, res) => {
  if (req.method === 'GET' && req.url === '/v1/orders/count') {
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM orders');
    return answer(res, 200, { count: rows[0].n });
  }
  if (req.method !== 'POST' || req.url !== '/v1/orders') return answer(res, 404, { error: 'not found' });
  const chunks = [];
  for await (const c of req) chunks.push(c);
  let order;
  try {
    order = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return answer(res, 400, { error: 'the body must be JSON' });
  }
  if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
  const { rows } = await pool.query('INSERT INTO orders (body) VALUES ($1) RETURNING id', [JSON.stringify(order)]);
  return answer(res, 201, { id: Number(rows[0].id), order });
};

const wrapped = rc.wrap(handler);
const server = http.createServer((req, res) => {
  wrapped(req, res).catch((err) => {
    console.error('handler error:', err);
    if (!res.headersSent) answer(res, 500, { error: 'internal' });
    else res.destroy();
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${server.address().port}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => pool.end().then(() => process.exit(0))));
