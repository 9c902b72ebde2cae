// Drives the operator console in Debian's chromium. Started by
// integration/console_browser_test.go, which sets up the daemon, its
// database and the rows named below, and checks the database afterwards.
//
// Environment: CONSOLE_URL, CONSOLE_TOKEN, ATTACKER_URL, KEY_SEARCH,
// KEY_UNKNOWN, KEY_VICTIM, RUN_ID, PAUSED_TOOL, BULK_TOOL, SCREENSHOTS.
// Prints one "PASS name" line per check; exits 1 on the first failure.
'use strict';
const { chromium } = require('playwright-core');
const fs = require('fs');
const os = require('os');
const path = require('path');

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error('missing environment variable ' + name);
  return v;
};
const base = env('CONSOLE_URL');
const shots = env('SCREENSHOTS');
const timeout = 90_000;

function check(cond, what) {
  if (!cond) throw new Error('FAIL ' + what);
}

let current = null; // the page, for failure reports

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'console-chromium-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const errors = [];
  const foreign = [];
  context.on('request', (req) => {
    const u = new URL(req.url());
    if (!['http:', 'https:'].includes(u.protocol)) return;
    if (u.hostname !== '127.0.0.1') foreign.push(req.url());
  });
  const page = context.pages()[0] || await context.newPage();
  current = page;
  page.setDefaultTimeout(timeout);
  // Expected refusals (404 pages, 403 answers) log "Failed to load
  // resource"; allowed is the set of such statuses a step expects.
  let allowed = new Set();
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const m = /status of (\d+)/.exec(msg.text());
    if (m && allowed.has(Number(m[1]))) return;
    errors.push(msg.text() + ' (' + (msg.location().url || page.url()) + ')');
  });
  page.on('pageerror', (err) => errors.push(String(err)));

  const shot = async (name) => page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });
  const visit = async (p, status = 200) => {
    const resp = await page.goto(base + p, { waitUntil: 'load' });
    check(resp && resp.status() === status, `GET ${p}: ${resp && resp.status()}, want ${status}`);
    return resp;
  };
  const pass = (name) => console.log('PASS ' + name);

  // 1. Every page loads with no console error and no request leaving the host.
  await page.waitForTimeout(200);
  await visit('/');
  // The chart needs two samples; the overview redraws itself without a reload.
  await page.waitForFunction(() => document.querySelectorAll('#backlog-chart polyline').length === 2, null, { timeout });
  for (const p of ['/rows', '/rows/' + encodeURIComponent(env('KEY_SEARCH')), '/runs/' + encodeURIComponent(env('RUN_ID')),
    '/parked', '/pauses']) {
    await visit(p);
  }
  await visit('/login');
  await shot('login');
  allowed = new Set([404]);
  await visit('/rows/idem_v1_no_such_key', 404);
  check(await page.getByRole('heading', { name: 'Not found' }).isVisible(), 'not-found page heading');
  await shot('notfound');
  allowed = new Set();
  check(errors.length === 0, 'console errors: ' + errors.join(' | '));
  check(foreign.length === 0, 'requests leaving 127.0.0.1: ' + foreign.join(' '));
  pass('every page loads without console errors or foreign requests');

  // 2. An action without the token is refused.
  const noToken = await context.request.post(base + '/api/v1/actions/cancel', { data: { key: env('KEY_VICTIM') } });
  check(noToken.status() === 401, 'action without the token: ' + noToken.status());
  const badToken = await context.request.post(base + '/api/v1/actions/cancel',
    { data: { key: env('KEY_VICTIM') }, headers: { Authorization: 'Bearer wrong' } });
  check(badToken.status() === 401, 'action with a wrong token: ' + badToken.status());
  pass('actions without the token are refused');

  // 3. Log in with the token.
  await visit('/login?next=/');
  await page.getByLabel('Your name').fill('alice');
  await page.getByLabel('Console token').fill(env('CONSOLE_TOKEN'));
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL(base + "/", { timeout: 15000 });
  check(await page.getByText('console:alice').isVisible(), 'logged in as console:alice');
  pass('log in');
  // The pages as an operator with actions sees them, before acting.
  await page.waitForFunction(() => document.querySelectorAll('#backlog-chart polyline').length === 2, null, { timeout });
  await shot('overview');
  for (const [p, name] of [['/rows?tool=send_email', 'rows'], ['/rows/' + encodeURIComponent(env('KEY_UNKNOWN')), 'row-resolve'],
    ['/runs/' + encodeURIComponent(env('RUN_ID')), 'run'], ['/parked', 'parked'], ['/pauses', 'pauses']]) {
    await visit(p);
    await shot(name);
  }

  // 4. A cross-site POST is refused although the browser holds a session.
  allowed = new Set([403]);
  await page.goto(env('ATTACKER_URL'));
  await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Win a prize' }).click()]);
  check(page.url().startsWith(base), 'the cross-site form reached the console');
  const refused = await page.textContent('main');
  check(/refused|CSRF/i.test(refused), 'cross-site POST: ' + refused.slice(0, 200));
  allowed = new Set();
  pass('a cross-site POST is refused');

  // 5. Search a key and see its attempts.
  await visit('/');
  await page.getByLabel('Search').fill(env('KEY_SEARCH'));
  await page.getByLabel('Search').press('Enter');
  await page.waitForLoadState('load');
  check((await page.textContent('h1')).includes(env('KEY_SEARCH')), 'search lands on the row page');
  const attempts = await page.locator('#attempts li').allTextContents();
  check(attempts.length >= 1 && /attempt 1/.test(attempts[0]), 'attempts: ' + attempts.join(' | '));
  check(await page.getByText('chain verified').isVisible(), 'audit chain verified');
  await shot('row-attempts');
  pass('search a key and see its attempts');

  // 6. Resolve an outcome_unknown row.
  await visit('/rows/' + encodeURIComponent(env('KEY_UNKNOWN')));
  await page.getByLabel(/succeeded/).check();
  await page.getByLabel('Note').fill('checked the provider dashboard: the order shipped');
  await page.getByRole('button', { name: 'Resolve' }).click();
  await page.waitForLoadState('load');
  check(await page.getByRole('heading', { name: 'Resolved' }).isVisible(), 'resolve result');
  check((await page.textContent('main')).includes('succeeded'), 'resolved as succeeded');
  pass('resolve an outcome_unknown row');

  // 7. Resume a paused route and watch it drain on the live overview.
  await visit('/pauses');
  check((await page.textContent('main')).includes(env('PAUSED_TOOL')), 'the pause is listed');
  await page.getByRole('button', { name: 'Resume' }).click();
  await page.waitForLoadState('load');
  check(await page.getByRole('heading', { name: 'Resumed' }).isVisible(), 'resume result');
  await visit('/');
  const tool = env('PAUSED_TOOL');
  await page.waitForFunction((t) => !Array.from(document.querySelectorAll('#by-tool tbody tr'))
    .some((tr) => tr.textContent.includes(t)), tool, { timeout });
  pass('resume a paused route and watch it drain');

  // 8. Bulk requeue: the dry run first, then Confirm.
  await visit('/rows?status=failed&tool=' + encodeURIComponent(env('BULK_TOOL')));
  await page.getByRole('button', { name: 'Requeue all…' }).click();
  await page.waitForLoadState('load');
  check(await page.getByRole('heading', { name: 'Dry run: requeue' }).isVisible(), 'dry run shown');
  const would = await page.textContent('#count');
  check(would === '3', 'dry run count ' + would);
  await shot('bulk-dry-run');
  await page.getByRole('button', { name: 'Confirm' }).click();
  await page.waitForLoadState('load');
  check(await page.getByRole('heading', { name: 'Done: requeue' }).isVisible(), 'confirm done');
  check((await page.textContent('#count')) === '3', 'requeued 3');
  // The answer is a page of its own (POST, then a redirect): reloading it
  // shows it again and acts no more.
  const answer = page.url();
  check(answer.startsWith(base + '/results/'), 'the answer is at ' + answer);
  const reloaded = await page.reload({ waitUntil: 'load' });
  check(reloaded && reloaded.status() === 200 && reloaded.request().method() === 'GET', 'reloading the answer: ' +
    (reloaded && reloaded.request().method() + ' ' + reloaded.status()));
  check(page.url() === answer && (await page.textContent('#count')) === '3', 'the reloaded answer');
  pass('bulk requeue with its dry run, then Confirm; its answer reloads without acting');

  // 9. The requeued rows have no route: the overview flags their tool with
  // a link to its pending rows, and its chart has labelled axes, both as
  // the page's script redraws them.
  await visit('/');
  await page.evaluate(() => {
    document.querySelectorAll('#by-tool tbody tr, #backlog-chart > *').forEach((el) => el.setAttribute('data-server', ''));
  });
  const bulkTool = env('BULK_TOOL');
  await page.waitForFunction((t) => !document.querySelector('#by-tool [data-server], #backlog-chart [data-server]') &&
    document.querySelector('#by-tool a[data-no-route="' + t + '"]'), bulkTool, { timeout });
  const ticks = await page.locator('#backlog-chart .axis-x text.tick').allTextContents();
  check(ticks.length === 5 && ticks.every((x) => /^\d\d:\d\d:\d\d$/.test(x)), 'time ticks: ' + ticks.join(' '));
  const rowsTicks = await page.locator('#backlog-chart .axis-y text.tick').allTextContents();
  check(rowsTicks.length >= 2 && rowsTicks[0] === '0', 'rows ticks: ' + rowsTicks.join(' '));
  const titles = await page.locator('#backlog-chart .axis-title').allTextContents();
  check(titles.includes('rows') && titles.includes('time (UTC)'), 'axis titles: ' + titles.join(' | '));
  await page.locator('#by-tool a[data-no-route="' + bulkTool + '"]').click();
  await page.waitForLoadState('load');
  const u = new URL(page.url());
  check(u.pathname === '/rows' && u.searchParams.get('status') === 'pending' && u.searchParams.get('tool') === bulkTool,
    'the no-route link leads to ' + page.url());
  pass('an unrouted tool is flagged with a link to its rows; the chart has labelled axes');

  // The overview last, with the history of everything above.
  await visit('/');
  await page.waitForTimeout(2500);
  await shot('overview-drained');
  check(errors.length === 0, 'console errors: ' + errors.join(' | '));
  check(foreign.length === 0, 'requests leaving 127.0.0.1: ' + foreign.join(' '));
  pass('no console error and no foreign request in the whole session');
  await context.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

main().then(() => process.exit(0), async (err) => {
  console.error(err && err.stack || String(err));
  if (current) {
    const text = await current.textContent('body').catch(() => '');
    console.error('at ' + current.url() + ': ' + String(text).replace(/\s+/g, ' ').slice(0, 600));
  }
  process.exit(1);
});
