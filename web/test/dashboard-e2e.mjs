//! End-to-end test of the operator dashboard against the real service: Debian's Chromium
//! (playwright-core) signs up through /signup, adds a stream on a local HLS origin, sees its
//! first probe on the streams page and its detail chart, mints an API key, plays HLS with the
//! SDK on the demo page with that key, finds the view on the views page and the QoE tiles
//! changed, adds a signed webhook on the alerts page (verifying the signature of its test
//! delivery), a stream rule and a secret rotation, then revokes the key. Every page is checked with axe-core (no serious or critical
//! violation) in light and in dark mode, for horizontal overflow at 375 px, and screenshotted
//! (light and dark) into target/screenshots/dashboard/. Any console error, page error or CSP
//! violation fails the test.
//!
//! Env: STREAMWATCH_BIN (default ../target/debug/streamwatch from web/), CHROMIUM_BIN
//! (/usr/bin/chromium), FFMPEG_BIN (/usr/bin/ffmpeg), E2E_KEEP=1 (keep temp files).

import { execFileSync, spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { makeHls, serveStatic } from '../../sdk/test/e2e/media.mjs';

const webRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repoRoot = resolve(webRoot, '..');
const env = process.env;
const BIN = resolve(webRoot, env.STREAMWATCH_BIN || '../target/debug/streamwatch');
const SHOTS = join(repoRoot, 'target/screenshots/dashboard');
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--autoplay-policy=no-user-gesture-required',
];

const results = [];
const diagnostics = [];
const cleanups = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const assert = (cond, msg) => {
  if (!cond) throw new Error(msg);
};

async function check(name, fn) {
  const t0 = Date.now();
  try {
    const value = await fn();
    results.push({ name, ok: true });
    console.log(`  ok    ${name} (${Date.now() - t0} ms)`);
    return value;
  } catch (e) {
    results.push({ name, ok: false });
    console.log(`  FAIL  ${name}: ${e && e.message}`);
    throw e;
  }
}

/** Polls `fn` until it returns something truthy; the deadline only bounds a broken run. */
async function waitFor(what, fn, timeoutMs, everyMs = 250) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what}${last ? ` (last error: ${last.message})` : ''}`);
}

const freePort = () =>
  new Promise((res, rej) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
    s.on('error', rej);
  });

/** A webhook receiver on loopback: records each request's headers and body, answers 200. */
function startReceiver() {
  const requests = [];
  const server = createHttpServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      requests.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(200).end('ok');
    });
  });
  return new Promise((res) =>
    server.listen(0, '127.0.0.1', () =>
      res({ url: `http://127.0.0.1:${server.address().port}/hook`, requests, close: () => new Promise((r) => server.close(r)) }),
    ),
  );
}

async function startStreamwatch(dataDir, { rateLimit = 'off' } = {}) {
  assert(existsSync(BIN), `no streamwatch binary at ${BIN} (cargo build, or set STREAMWATCH_BIN)`);
  const port = await freePort();
  // Loopback origins may be registered (the test's media server); views refresh every second.
  const args = [
    'serve', '--listen', `127.0.0.1:${port}`, '--metrics-listen', '', '--data-dir', dataDir,
    '--auth-rate-limit', rateLimit, '--allow-private', '127.0.0.0/8', '--alerts-allow-private', '127.0.0.0/8', '--qoe-refresh', '1s',
  ];
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, NO_COLOR: '1' } });
  const out = [];
  const keep = (chunk) => out.push(...String(chunk).split('\n').filter(Boolean)) && out.splice(0, Math.max(0, out.length - 60));
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  let exited = null;
  child.on('exit', (code, signal) => (exited = `exited with ${code ?? signal}`));
  diagnostics.push(() => [`streamwatch ${exited || 'running'}; last output:`, ...out]);
  cleanups.push(async () => {
    if (exited) return;
    child.kill('SIGTERM');
    await Promise.race([new Promise((r) => child.once('exit', r)), sleep(5000)]);
    if (!exited) child.kill('SIGKILL');
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor('GET /readyz 200', async () => {
    assert(!exited, `streamwatch ${exited}`);
    return (await fetch(`${url}/readyz`)).status === 200;
  }, 60_000);
  return url;
}

async function main() {
  console.log('dashboard e2e: real Chromium, real streamwatch');
  const tmp = mkdtempSync(join(tmpdir(), 'dashboard-e2e-'));
  cleanups.push(() => (env.E2E_KEEP === '1' ? console.log(`  note  kept ${tmp}`) : rmSync(tmp, { recursive: true, force: true })));
  mkdirSync(SHOTS, { recursive: true });

  const media = join(tmp, 'media');
  await check('ffmpeg makes an 8 s HLS VOD', () => makeHls(media));
  const statics = await serveStatic({ '/media': media });
  cleanups.push(statics.close);
  const src = `${statics.url}/media/master.m3u8`;
  const dataDir = join(tmp, 'data');
  const base = await check('streamwatch is ready', () => startStreamwatch(dataDir));

  const browser = await chromium.launch({ executablePath: env.CHROMIUM_BIN || '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
  cleanups.push(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, timezoneId: 'Asia/Kolkata', locale: 'en-US' });

  // Every page of this context is watched: console errors, page errors, CSP violations.
  const problems = [];
  const logs = [];
  // Statuses a step provokes on purpose (Chromium logs each failed load as a console error).
  const provoked = new Set();
  diagnostics.push(() => ['browser log:', ...logs.slice(-60)]);
  context.on('page', (page) => watch(page));
  await context.addInitScript(() =>
    document.addEventListener('securitypolicyviolation', (e) => console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`)),
  );
  function watch(page) {
    page.on('console', (m) => {
      logs.push(`[${m.type()}] ${m.text()}`);
      const status = /^Failed to load resource: the server responded with a status of (\d+)/.exec(m.text());
      if (status && provoked.has(Number(status[1]))) return;
      if (m.type() === 'error') problems.push(`${page.url()}: console error: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`${page.url()}: page error: ${e.message}`));
  }
  const noProblems = (where) => {
    assert(problems.length === 0, `${where}: ${problems.join('; ')}`);
  };

  const page = await context.newPage();
  const path = () => new URL(page.url()).pathname + new URL(page.url()).search;

  await check('/app without a session goes to /login?next=%2Fapp', async () => {
    const r = await fetch(`${base}/app/streams?q=x`, { redirect: 'manual' });
    assert(r.status === 302 && r.headers.get('location') === '/login?next=%2Fapp%2Fstreams%3Fq%3Dx', `${r.status} ${r.headers.get('location')}`);
    await page.goto(`${base}/app`);
    assert(path() === '/login', `landed on ${path()}`);
  });

  await check('the landing page links to sign-in and sign-up', async () => {
    const landing = await context.newPage();
    await landing.goto(base + '/');
    assert(await landing.getByRole('link', { name: 'Sign in' }).count() === 1, 'no Sign in link');
    assert(await landing.getByRole('link', { name: 'Create an account' }).count() === 1, 'no sign-up link');
    // The news form is apart from the account links and says it makes no account.
    const news = landing.getByRole('region', { name: 'News by e-mail' });
    assert(await news.getByRole('button', { name: 'Keep me posted' }).count() === 1, 'no news form in its own section');
    assert((await news.innerText()).includes('Not a sign-up'), 'the news form does not say it is no sign-up');
    assert(await news.getByRole('link', { name: /Create an account|Sign in/ }).count() === 0, 'account links beside the news form');
    await landing.close();
  });

  const email = `ops-${Date.now()}@example.com`;
  await check('sign up through /signup (a bad password is explained beside its field first)', async () => {
    await page.getByRole('link', { name: 'Create one' }).click();
    await page.waitForURL(/\/signup/);
    await page.getByLabel('Name').fill('Ops');
    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Password').fill('short');
    provoked.add(400);
    // The browser's own minlength check would stop the request: lift it to see the server's message.
    await page.$eval('#password', (el) => el.removeAttribute('minlength'));
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByText('Password too short').waitFor();
    provoked.delete(400);
    await page.getByLabel('Password').fill('correct-horse-battery');
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.waitForURL(`${base}/app`);
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    noProblems('sign-up');
  });

  // Sign-up is by invitation after the first account (the default STREAMWATCH_SIGNUP=invite).
  const newPage = async (opts = {}) => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, timezoneId: 'Asia/Kolkata', locale: 'en-US', ...opts });
    cleanups.push(() => ctx.close());
    const p = await ctx.newPage();
    watch(p);
    return p;
  };
  const invitee = `invitee-${Date.now()}@example.com`;
  let pendingInvite;
  let inviteePage;
  await check('team: the first account owns the server; its invitation link signs up one colleague, then is spent', async () => {
    const stranger = await newPage();
    await stranger.goto(`${base}/signup`);
    await stranger.getByText('Sign-up on this server is by invitation: ask its owner for a link.').waitFor();
    assert(await stranger.getByRole('button', { name: 'Create account' }).count() === 0, 'a sign-up form without an invitation');
    await stranger.goto(`${base}/login`);
    assert(await stranger.getByRole('link', { name: 'Create one' }).count() === 0, 'the login page offers sign-up');

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Team' }).click();
    await page.waitForURL(`${base}/app/team`);
    await page.getByRole('button', { name: 'Create invitation link' }).click();
    const link = await page.locator('.reveal #invitation-url').innerText();
    assert(link.startsWith(`${base}/signup?invite=`), `link ${link}`);
    noProblems('mint invitation');

    inviteePage = await newPage();
    await inviteePage.goto(link);
    await inviteePage.getByText('You were invited to this streamwatch server.').waitFor();
    await inviteePage.getByLabel('Name').fill('Colleague');
    await inviteePage.getByLabel('E-mail').fill(invitee);
    await inviteePage.getByLabel('Password').fill('correct-horse-battery');
    await inviteePage.getByRole('button', { name: 'Create account' }).click();
    await inviteePage.waitForURL(`${base}/app`);
    const nav = inviteePage.getByRole('navigation', { name: 'Main' });
    assert(await nav.getByRole('link', { name: 'Team' }).count() === 0, 'a member sees the Team page');
    provoked.add(404);
    const r = await inviteePage.goto(`${base}/app/team`);
    provoked.delete(404);
    assert(r.status() === 404, `member on /app/team: ${r.status()}`);

    const again = await newPage();
    await again.goto(link);
    await again.getByText('This invitation link was used already').waitFor();

    await page.goto(`${base}/app/team`);
    const row = page.locator('tr', { hasText: invitee });
    assert((await row.locator('.badge').innerText()) === 'used', 'the used invitation is not marked used');
    // A pending one for the screenshots of the invited sign-up page, then revoke another.
    const mint = async (previous) => {
      await page.getByRole('button', { name: 'Create invitation link' }).click();
      // The new reveal replaces the previous one.
      await page.waitForFunction((prev) => (document.querySelector('.reveal #invitation-url')?.textContent ?? prev) !== prev, previous);
      return page.locator('.reveal #invitation-url').innerText();
    };
    pendingInvite = await mint(link);
    const revoked = await mint(pendingInvite);
    await page.goto(`${base}/app/team`);
    const deleted = page.waitForResponse((r) => r.request().method() === 'DELETE' && r.url().includes('/api/v1/invitations/'));
    await page.getByRole('button', { name: /^Revoke/ }).first().click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
    assert((await deleted).status() === 204, 'DELETE /api/v1/invitations/{id} did not answer 204');
    await again.goto(revoked);
    await again.getByText('This invitation link was revoked.').waitFor();
    await page.goto(`${base}/app`);
    noProblems('team');
  });

  await check('account: a member changes the password from the page; the other device is signed out', async () => {
    const otherDevice = await newPage();
    await otherDevice.goto(`${base}/login`);
    await otherDevice.getByLabel('E-mail').fill(invitee);
    await otherDevice.getByLabel('Password').fill('correct-horse-battery');
    await otherDevice.getByRole('button', { name: 'Sign in' }).click();
    await otherDevice.waitForURL(`${base}/app`);

    await inviteePage.goto(`${base}/app`);
    await inviteePage.getByRole('link', { name: invitee }).click();
    await inviteePage.waitForURL(`${base}/app/account`);
    await inviteePage.getByLabel('Current password').fill('not-my-password');
    await inviteePage.getByLabel('New password').fill('staple-battery-horse');
    provoked.add(400);
    await inviteePage.getByRole('button', { name: 'Change password' }).click();
    await inviteePage.getByText('Invalid password').waitFor();
    provoked.delete(400);
    await inviteePage.getByLabel('Current password').fill('correct-horse-battery');
    await inviteePage.getByLabel('New password').fill('staple-battery-horse');
    await inviteePage.getByRole('button', { name: 'Change password' }).click();
    await inviteePage.getByText('Password changed. Your other devices are signed out.').first().waitFor();
    await inviteePage.goto(`${base}/app/streams`);
    assert(new URL(inviteePage.url()).pathname === '/app/streams', 'this device stays signed in');
    await otherDevice.goto(`${base}/app/streams`);
    assert(new URL(otherDevice.url()).pathname === '/login', `the other device is on ${otherDevice.url()}`);
    noProblems('account');
  });

  await check('users add: the one-time password signs in once, and the dashboard asks for a new one first', async () => {
    const out = execFileSync(BIN, ['users', 'add', '--email', 'ops2@example.com', '--name', 'Ops Two', '--data-dir', dataDir], {
      env: { PATH: env.PATH },
      encoding: 'utf8',
    });
    const once = /one-time password \(shown once, not stored\): (\S+)/.exec(out)?.[1];
    assert(once, `users add printed ${out}`);
    const p = await newPage();
    await p.goto(`${base}/login?next=%2Fapp%2Fstreams`);
    await p.getByLabel('E-mail').fill('ops2@example.com');
    await p.getByLabel('Password').fill(once);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.waitForURL(`${base}/app/account`);
    await p.getByText('Choose your own password to continue.').waitFor();
    for (const scheme of ['light', 'dark']) {
      for (const width of [1280, 375]) {
        await p.setViewportSize({ width, height: 900 });
        await p.emulateMedia({ colorScheme: scheme });
        await p.screenshot({ path: join(SHOTS, `account-one-time-password-${scheme}${width === 375 ? '-375' : ''}.png`), fullPage: true });
      }
    }
    await p.setViewportSize({ width: 1280, height: 900 });
    await p.getByLabel('One-time password').fill(once);
    await p.getByLabel('New password').fill('my-own-password-42');
    await p.getByRole('button', { name: 'Change password' }).click();
    await p.waitForURL(`${base}/app`);
    await p.getByRole('heading', { name: 'Overview' }).waitFor();
    noProblems('one-time password');
  });

  await check('login: a rate-limited sign-in says how long to wait', async () => {
    const limited = await startStreamwatch(join(tmp, 'data-limited'), { rateLimit: '2/60s' });
    const p = await newPage();
    await p.goto(`${limited}/login`);
    provoked.add(401);
    provoked.add(429);
    for (const expected of [401, 401, 429]) {
      await p.getByLabel('E-mail').fill('nobody@example.com');
      await p.getByLabel('Password').fill('wrong-password');
      const answered = p.waitForResponse((r) => r.url().endsWith('/api/auth/sign-in/email'));
      await p.getByRole('button', { name: 'Sign in' }).click();
      const r = await answered;
      assert(r.status() === expected, `sign-in answered ${r.status()}, not ${expected}`);
      if (expected === 429) assert(/^\d+$/.test(r.headers()['retry-after'] ?? ''), `Retry-After: ${r.headers()['retry-after']}`);
    }
    await p.getByText(/^Too many attempts/).waitFor();
    const message = await p.locator('[data-form-error]').innerText();
    assert(/^Too many attempts from this network\. Try again in (\d+ seconds?|1 minute)\.$/.test(message.trim()), `message: ${message}`);
    provoked.delete(401);
    provoked.delete(429);
    for (const scheme of ['light', 'dark']) {
      for (const width of [1280, 375]) {
        await p.setViewportSize({ width, height: 900 });
        await p.emulateMedia({ colorScheme: scheme });
        await p.screenshot({ path: join(SHOTS, `login-429-${scheme}${width === 375 ? '-375' : ''}.png`), fullPage: true });
      }
    }
    noProblems('login 429');
  });

  const tileValue = (label) =>
    page.locator('.tile', { has: page.locator('.tile-label', { hasText: new RegExp(`^${label}$`) }) }).locator('.tile-value').innerText();
  const viewsBefore = await check('the overview shows the QoE tiles (no views yet)', async () => {
    const v = await tileValue('Views');
    assert(v === '0', `Views tile ${v}`);
    return v;
  });

  const streamId = await check('add a stream on a local origin: an SSRF refusal shows inline, then the stream page opens', async () => {
    await page.goto(`${base}/app/streams`);
    await page.getByLabel('Manifest URL').fill('http://169.254.169.254/latest/meta-data');
    provoked.add(400);
    await page.getByRole('button', { name: 'Add stream' }).click();
    await page.getByText('Hostname resolves to a private address (169.254.169.254)').waitFor();
    provoked.delete(400);
    await page.getByLabel('Manifest URL').fill(src);
    await page.getByLabel('Name (optional)').fill('E2E media');
    await page.getByRole('button', { name: 'Add stream' }).click();
    await page.waitForURL(/\/app\/streams\/[A-Za-z0-9_-]+$/);
    await page.getByRole('heading', { name: 'E2E media' }).waitFor();
    noProblems('add stream');
    return new URL(page.url()).pathname.split('/').pop();
  });

  await check('the first probe shows on the streams page', async () => {
    await waitFor('a probe on the streams page', async () => {
      await page.goto(`${base}/app/streams`);
      const row = page.locator('tr', { has: page.getByRole('link', { name: 'E2E media' }) });
      return (await row.locator('time').count()) === 1 && (await row.locator('.badge').innerText()) === 'healthy';
    }, 30_000, 500);
  });

  await check('the stream page draws its latency chart from the probe', async () => {
    await page.goto(`${base}/app/streams/${streamId}`);
    await page.waitForSelector('figure[data-chart="latency"][data-chart-state="drawn"]', { timeout: 15_000 });
    await page.waitForSelector('figure[data-chart="timeline"][data-chart-state]:not([data-chart-state="loading"])');
    noProblems('stream page');
  });

  await check("the agent feed page: each row's Found is that probe's own finding (detail and latency), not the stream's last action", async () => {
    await page.goto(`${base}/app/agents`);
    const rows = page.locator('table tbody tr');
    await rows.first().waitFor();
    const found = await rows.evaluateAll((trs) => trs.map((tr) => [tr.cells[4].textContent.trim(), tr.cells[5].textContent.trim()]));
    const stream = await page.evaluate(async (id) => (await (await fetch(`/api/v1/streams/${id}`)).json()).lastAction, streamId);
    for (const [latency, text] of found) {
      assert(text.endsWith(` (${latency})`), `Found "${text}" is not the probe's own finding (latency ${latency})`);
      assert(text !== stream, `Found repeats the stream's lastAction "${stream}"`);
    }
    noProblems('agent feed');
  });

  const rawKey = await check('mint a key: the raw key is shown once, with an SDK snippet for this server', async () => {
    await page.goto(`${base}/app/keys`);
    await page.getByLabel('Label').fill('e2e player');
    await page.getByRole('button', { name: 'Mint key' }).click();
    const key = await page.locator('.reveal #raw-key').innerText();
    assert(/^svc_/.test(key), `raw key ${key}`);
    const snippet = await page.locator('.reveal #sdk-snippet').innerText();
    assert(snippet.includes(key) && snippet.includes(`${base}/api/v1/telemetry`), `snippet ${snippet}`);
    // The list shows the new key without a reload (the reveal is still there).
    await page.locator('#keys-list tr', { hasText: 'e2e player' }).getByText('active').waitFor({ timeout: 10_000 });
    assert((await page.locator('#keys-list').getByText('No key yet').count()) === 0, 'the list still says "No key yet"');
    assert((await page.locator('.reveal #raw-key').innerText()) === key, 'the reveal went away');
    // The demo player, with this key.
    const demo = await page.getByRole('link', { name: 'play a stream in the demo player with this key' }).getAttribute('href');
    assert(demo === `${base}/demo/player.html#key=${encodeURIComponent(key)}`, `demo link ${demo}`);
    await page.screenshot({ path: join(SHOTS, 'keys-minted-light.png'), fullPage: true });
    noProblems('mint');
    return key;
  });

  let sessionId;
  await check('the SDK on the demo page plays HLS with that key', async () => {
    const demo = await context.newPage();
    await demo.goto(`${base}/demo/player.html?${new URLSearchParams({ src, key: rawKey, content: 'e2e-dashboard' })}`);
    await demo.waitForFunction(() => window.__sw && window.__sw.video.currentTime > 0.3, null, { timeout: 30_000 });
    sessionId = await demo.evaluate(() => window.__sw.telemetry.sessionId);
    await demo.locator('#state[data-state="playing"]').waitFor();
    await demo.waitForFunction(() => window.__sw.video.ended, null, { timeout: 45_000 });
    await demo.locator('#state[data-state="ended"]').waitFor();
    assert(await demo.getByRole('alert').isHidden(), 'an error shows after a good playback');
    await demo.close();
    noProblems('demo player');
  });

  await check('the view shows on the views page, and its page shows its events', async () => {
    await waitFor('the view on /app/views', async () => {
      await page.goto(`${base}/app/views`);
      return (await page.locator('tbody tr', { hasText: 'e2e-dashboard' }).count()) === 1;
    }, 30_000, 500);
    const row = page.locator('tbody tr', { hasText: 'e2e-dashboard' });
    assert((await row.getByRole('link', { name: 'E2E media' }).count()) === 1, 'the view is not linked to its stream');
    await row.locator('a').first().click();
    await page.waitForURL(/\/app\/views\//);
    await page.getByRole('cell', { name: 'playback_start' }).first().waitFor();
    noProblems('views');
  });

  await check('the QoE tiles changed', async () => {
    await waitFor('Views tile past 0', async () => {
      await page.goto(`${base}/app`);
      return (await tileValue('Views')) !== viewsBefore;
    }, 30_000, 500);
    assert((await tileValue('Views')) === '1', `Views tile ${await tileValue('Views')}`);
  });

  await check('the demo player says why it fails: state "failed", an HTTP 404 in words, and CORS for an origin that does not allow this page', async () => {
    const noCors = createHttpServer((_req, res) => res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' }).end('#EXTM3U\n'));
    await new Promise((r) => noCors.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => noCors.close(r)));
    const demo = await context.newPage();
    // Failed loads are what this step provokes: the console says so, the page must too.
    const own = [];
    demo.on('console', (m) => own.push(m.text()));
    provoked.add(404);
    const cases = [
      [`${statics.url}/media/no-such.m3u8`, /HTTP 404/],
      [`http://127.0.0.1:${noCors.address().port}/live.m3u8`, /probably needs CORS/],
    ];
    for (const [i, [bad, why]] of cases.entries()) {
      // The keys page's link, then the form, as a person would.
      await demo.goto(`${base}/demo/player.html#key=${encodeURIComponent(rawKey)}`);
      assert((await demo.locator('#key').inputValue()) === rawKey, 'the key is not filled in from the link');
      await demo.locator('#src').fill(bad);
      await demo.getByRole('button', { name: 'Play' }).click();
      await demo.locator('#state[data-state="failed"]').waitFor({ timeout: 30_000 });
      const error = await demo.getByRole('alert').innerText();
      assert(why.test(error), `error text: ${error}`);
      assert((await demo.locator('#state').innerText()) === 'failed', 'state is not "failed"');
      assert(!new URL(demo.url()).search.includes('svc_'), `the key went into the query: ${demo.url()}`);
      for (const scheme of ['light', 'dark']) {
        await demo.emulateMedia({ colorScheme: scheme });
        await demo.screenshot({ path: join(SHOTS, `demo-player-failed-${i}-${scheme}.png`), fullPage: true });
      }
      await demo.setViewportSize({ width: 375, height: 900 });
      await demo.screenshot({ path: join(SHOTS, `demo-player-failed-${i}-375.png`), fullPage: true });
      await demo.setViewportSize({ width: 1280, height: 900 });
      await demo.emulateMedia({ colorScheme: 'light' });
    }
    provoked.delete(404);
    await demo.close();
    // Chromium's own console lines about the failed loads are expected here, nothing else.
    problems.splice(0, problems.length, ...problems.filter((p) => !/demo\/player\.html/.test(p) || !/CORS|Failed to load|ERR_FAILED|net::/.test(p)));
    noProblems('demo player failures');
  });


  await check('alerts: a signed webhook (secret shown once) gets a verified test, a stream rule is added, the secret rotates', async () => {
    const hook = await startReceiver();
    cleanups.push(hook.close);
    await page.goto(`${base}/app/alerts`);
    await page.locator('#wh-name').fill('e2e hook');
    await page.locator('#wh-url').fill(hook.url);
    await page.getByRole('button', { name: 'Add webhook' }).click();
    const secret = await page.locator('.reveal #new-webhook-secret').innerText();
    assert(/^whsec_[A-Za-z0-9+/=]+$/.test(secret), `secret ${secret}`);
    // Without a reload: the channel is listed and the rule forms it allows are there.
    await page.locator('#channels tr', { hasText: 'e2e hook' }).waitFor({ timeout: 10_000 });
    await page.locator('#sr-name').waitFor();
    assert((await page.getByText('No channel yet').count()) === 0, '"No channel yet" after adding one');
    await page.screenshot({ path: join(SHOTS, 'alerts-first-channel-light.png'), fullPage: true });
    // "Done" opens the stream rule form with the new channel chosen.
    await page.getByRole('link', { name: 'Done: add a rule' }).click();
    await page.waitForURL(/\/app\/alerts\?channel=[^#]+#stream-rule-h$/);
    const chosen = await page.locator('#sr-channels').evaluate((s) => Array.from(s.selectedOptions).map((o) => o.textContent));
    assert(JSON.stringify(chosen) === JSON.stringify(['e2e hook (webhook)']), `channels chosen: ${chosen}`);
    assert((await page.locator('#channels tr', { hasText: 'e2e hook' }).count()) === 1, 'the channel is not listed after Done');

    await page.getByRole('button', { name: 'Send test to e2e hook' }).click();
    const got = await waitFor('the test delivery at the receiver', () => hook.requests[0], 30_000);
    const [id, ts] = [got.headers['webhook-id'], got.headers['webhook-timestamp']];
    const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
    const expected = createHmac('sha256', key).update(`${id}.${ts}.${got.body}`).digest('base64');
    assert(got.headers['webhook-signature'].split(' ').includes(`v1,${expected}`), `signature ${got.headers['webhook-signature']}`);
    assert(JSON.parse(got.body).type === 'test', got.body);
    await waitFor('the delivery logged as sent', async () => {
      await page.goto(`${base}/app/alerts`);
      return (await page.locator('table', { has: page.getByRole('columnheader', { name: 'Attempts' }) }).locator('tbody tr .badge').first().innerText()) === 'sent';
    }, 30_000, 500);

    await page.locator('#sr-name').fill('E2E down');
    await page.locator('#sr-stream').selectOption({ label: 'E2E media' });
    await page.locator('#sr-channels').selectOption({ label: 'e2e hook (webhook)' });
    await page.getByRole('button', { name: 'Add stream rule' }).click();
    await page.locator('tr', { hasText: 'E2E down' }).getByText('E2E media: fires after 3 unplayable probes in a row, resolves after 2 playable').waitFor();

    await page.getByRole('button', { name: 'Rotate secret of e2e hook' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Rotate' }).click();
    const rotated = await page.locator('.reveal code[data-field="secret"]').innerText();
    assert(/^whsec_/.test(rotated) && rotated !== secret, `rotated ${rotated}`);
    noProblems('alerts');
  });

  await check('the view legend and the breakdown read as words (no stray separator, no metric ids)', async () => {
    await page.goto(`${base}/app/views/${encodeURIComponent(sessionId)}`);
    const legend = await page.getByRole('list', { name: 'Legend' }).locator('li').allInnerTexts();
    assert(JSON.stringify(legend.map((t) => t.trim())) === JSON.stringify(['starting', 'playing', 'stalled', 'paused', 'rendition switch', 'error']), `legend ${legend}`);
    await page.goto(`${base}/app/qoe`);
    const options = await page.locator('#metric option').evaluateAll((os) => os.map((o) => [o.value, o.textContent]));
    for (const [value, label] of options) assert(value !== label && !/[a-z][A-Z]/.test(label), `breakdown metric shown as "${label}"`);
    noProblems('legend and breakdown');
  });

  const pages = ['/app', '/app/streams', `/app/streams/${streamId}`, '/app/agents', '/app/qoe', '/app/views', `/app/views/${encodeURIComponent(sessionId)}`, '/app/keys', '/app/alerts', '/app/team', '/app/account', '/app/streams/nosuchstream', 'signed-out:/', 'signed-out:/demo/player.html'];
  await check('every page: axe finds no serious or critical violation (light and dark), no overflow at 375 px; screenshots saved', async () => {
    const failures = [];
    for (const scheme of ['light', 'dark']) {
      for (const width of [1280, 375]) {
        await page.setViewportSize({ width, height: 900 });
        await page.emulateMedia({ colorScheme: scheme });
        for (const p of [...pages, 'signed-out:/login', 'signed-out:/signup', `signed-out:${new URL(pendingInvite).pathname}${new URL(pendingInvite).search}`]) {
          let target = page;
          let url = p;
          if (p.startsWith('signed-out:')) {
            url = p.slice('signed-out:'.length);
            const ctx = await browser.newContext({ viewport: { width, height: 900 }, colorScheme: scheme });
            target = await ctx.newPage();
            watch(target);
          }
          if (url.endsWith('nosuchstream')) provoked.add(404);
          await target.goto(base + url);
          provoked.delete(404);
          await target.waitForFunction(() => Array.from(document.querySelectorAll('figure[data-chart]')).every((f) => f.dataset.chartState && f.dataset.chartState !== 'loading'));
          const base_ = url === '/' ? 'landing' : url.replace(/\?invite=.*/, '-invite').replace(/^\/app\/?/, '').replace(/^\//, '') || 'overview';
          const name = `${base_.replace(/[^a-z0-9]+/gi, '-')}-${scheme}${width === 375 ? '-375' : ''}.png`;
          await target.screenshot({ path: join(SHOTS, name), fullPage: true });
          if (width === 375) {
            const overflow = await target.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
            if (overflow > 0) failures.push(`${url} (${scheme}) overflows 375 px by ${overflow} px`);
            if (url === '/app/views') {
              // A view's outcome is readable without scrolling the table sideways.
              const right = await target.getByRole('columnheader', { name: 'Outcome' }).evaluate((th) => th.getBoundingClientRect().right);
              if (right > 375) failures.push(`/app/views (${scheme}): the Outcome column ends at ${right} px, off a 375 px screen`);
            }
          } else {
            await target.evaluate(axeSource);
            const violations = await target.evaluate(async () => {
              const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } });
              return r.violations
                .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
            });
            failures.push(...violations.map((v) => `${url} (${scheme}): ${v}`));
          }
          if (target !== page) await target.context().close();
        }
      }
    }
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.emulateMedia({ colorScheme: 'light' });
    assert(failures.length === 0, failures.join('\n        '));
    console.log(`        screenshots in ${SHOTS}`);
    noProblems('page checks');
  });

  await check('revoke the key with the confirm dialog; the SDK’s next batch is refused', async () => {
    await page.goto(`${base}/app/keys`);
    await page.getByRole('button', { name: 'Revoke e2e player' }).click();
    // Navigating while the DELETE is in flight would cancel it: wait for its answer first.
    const deleted = page.waitForResponse((r) => r.request().method() === 'DELETE' && r.url().includes('/api/v1/keys/'));
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
    assert((await deleted).status() === 204, 'DELETE /api/v1/keys/{id} did not answer 204');
    await waitFor('the key marked revoked', async () => {
      await page.goto(`${base}/app/keys`);
      return (await page.locator('tr', { hasText: 'e2e player' }).locator('.badge').innerText()) === 'revoked';
    }, 10_000);
    const r = await fetch(`${base}/api/v1/telemetry`, {
      method: 'POST',
      headers: { authorization: `Bearer ${rawKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ apiKey: rawKey, sessionId: 'after-revoke', events: [{ type: 'error', ts: new Date().toISOString(), payload: { code: 'X', message: 'x', fatal: false } }] }),
    });
    assert(r.status === 401, `telemetry after revoke answered ${r.status}`);
    noProblems('revoke');
  });

  await check('sign out, then sign in lands on next', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(`${base}/login`);
    await page.goto(`${base}/app/keys`);
    await page.waitForURL(`${base}/login?next=%2Fapp%2Fkeys`);
    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Password').fill('correct-horse-battery');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${base}/app/keys`);
    noProblems('sign in');
  });
}

let failed = false;
try {
  await main();
} catch (e) {
  failed = true;
  if (!results.some((r) => !r.ok)) {
    results.push({ name: 'harness', ok: false });
    console.log(`  FAIL  ${e && e.stack}`);
  }
  for (const d of diagnostics) console.log(d().map((l) => `        ${l}`).join('\n'));
} finally {
  for (const c of cleanups.reverse()) {
    try {
      await c();
    } catch {
      // best effort
    }
  }
}
const passed = results.filter((r) => r.ok).length;
console.log(`\ndashboard e2e: ${passed} passed, ${results.length - passed} failed`);
process.exit(failed || results.some((r) => !r.ok) ? 1 : 0);
