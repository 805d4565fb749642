//! Real-browser end-to-end test: Debian's Chromium (driven by playwright-core) plays a two-rendition
//! HLS stream made by ffmpeg through hls.js on /demo/player.html served by streamwatch, with the SDK
//! attached; the session is then read back from GET /api/v1/telemetry/sessions/{id}/events. A second
//! session stalls where the test's origin holds a segment, and is found as a view in /api/v1/qoe/views.
//!
//! The demo page loads hls.js and the SDK from streamwatch itself: the test checks that the page
//! reaches no host but streamwatch and the media origin, and that no Content-Security-Policy
//! violation or console error happens.
//!
//! Env: STREAMWATCH_BIN (default ../target/debug/streamwatch from sdk/), STREAMWATCH_URL (use a running
//! server instead), CHROMIUM_BIN (/usr/bin/chromium), FFMPEG_BIN (/usr/bin/ffmpeg), E2E_KEEP=1 (keep
//! temp files).

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeHls, serveStatic } from './media.mjs';

const sdkRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const env = process.env;
const BIN = resolve(sdkRoot, env.STREAMWATCH_BIN || '../target/debug/streamwatch');
const CHROMIUM = env.CHROMIUM_BIN || '/usr/bin/chromium';
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
const ORDER = ['playback_start', 'playback_pause', 'playback_resume', 'quality_change', 'session_end'];

/**
 * A player page on another origin than streamwatch (the SDK's real situation): it imports the
 * bundle from streamwatch and posts to streamwatch's ingest route, so both need CORS.
 */
const THIRD_PARTY_PAGE = `<!doctype html><meta charset="utf-8"><title>third-party player</title>
<script type="module">
const q = new URLSearchParams(location.search);
const sw = q.get('sw');
try {
  const { createTelemetry } = await import(sw + '/sdk/@service/player-sdk@0.1.0/dist/index.js');
  const t = createTelemetry({ apiKey: q.get('key'), ingestUrl: sw + '/api/v1/telemetry', options: { debug: true } });
  t.emit({ type: 'error', payload: { code: 'E2E_THIRD_PARTY', message: 'cross-origin probe', fatal: false } });
  await t.end('ended');
  window.__done = { sessionId: t.sessionId };
} catch (e) {
  window.__done = { failed: String(e && e.message) };
}
</script>`;

const results = [];
const diagnostics = [];
const cleanups = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function check(name, fn) {
  const t0 = Date.now();
  try {
    const value = await fn();
    results.push({ name, ok: true, ms: Date.now() - t0 });
    console.log(`  ok    ${name} (${Date.now() - t0} ms)`);
    return value;
  } catch (e) {
    results.push({ name, ok: false, ms: Date.now() - t0, error: e });
    console.log(`  FAIL  ${name}: ${e && e.message}`);
    throw e;
  }
}

const assert = (cond, msg) => {
  if (!cond) throw new Error(msg);
};

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
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${last.message})` : ''}`);
}

const freePort = () =>
  new Promise((res, rej) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
    s.on('error', rej);
  });

async function startStreamwatch(dataDir) {
  if (env.STREAMWATCH_URL) return env.STREAMWATCH_URL.replace(/\/$/, '');
  assert(existsSync(BIN), `no streamwatch binary at ${BIN} (build it with cargo build, or set STREAMWATCH_BIN)`);
  const port = await freePort();
  // Loopback origins are allowed so the test's media origin can be registered as a stream;
  // QoE views are refreshed every second so the test waits little for them.
  const args = [
    'serve', '--listen', `127.0.0.1:${port}`, '--metrics-listen', '127.0.0.1:0', '--data-dir', dataDir,
    '--auth-rate-limit', 'off', '--allow-private', '127.0.0.0/8', '--qoe-refresh', '1s',
  ];
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, NO_COLOR: '1', RUST_LOG: env.RUST_LOG || 'info' } });
  const out = [];
  const keep = (chunk) => out.push(...String(chunk).split('\n').filter(Boolean)) && out.splice(0, Math.max(0, out.length - 60));
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  let exited = null;
  child.on('exit', (code, signal) => (exited = `exited with ${code ?? signal}`));
  diagnostics.push(() => [`streamwatch ${BIN} ${args.join(' ')} ${exited || 'running'}; last output:`, ...out]);
  cleanups.push(async () => {
    if (exited) return;
    child.kill('SIGTERM');
    await Promise.race([new Promise((r) => child.once('exit', r)), sleep(5000)]);
    if (!exited) child.kill('SIGKILL');
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    'GET /readyz 200',
    async () => {
      assert(!exited, `streamwatch ${exited}`);
      return (await fetch(`${url}/readyz`)).status === 200;
    },
    60_000,
  );
  return url;
}

async function api(base, method, path, { cookie, body } = {}) {
  const res = await fetch(base + path, {
    method,
    headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...(cookie ? { cookie } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { res, status: res.status, json, text };
}

async function main() {
  console.log('player-sdk e2e: real Chromium, hls.js, streamwatch');
  const tmp = mkdtempSync(join(tmpdir(), 'player-sdk-e2e-'));
  cleanups.push(() => (env.E2E_KEEP === '1' ? console.log(`  note  kept ${tmp}`) : rmSync(tmp, { recursive: true, force: true })));

  await check('tools present (chromium, ffmpeg, dist/index.js)', () => {
    assert(existsSync(CHROMIUM), `no browser at ${CHROMIUM} (apt-get install -y chromium)`);
    assert(existsSync(env.FFMPEG_BIN || '/usr/bin/ffmpeg'), 'no ffmpeg (apt-get install -y ffmpeg)');
    assert(existsSync(join(sdkRoot, 'dist/index.js')), 'no dist/index.js (npm run build)');
  });

  const media = join(tmp, 'media');
  await check('ffmpeg makes an 8 s HLS VOD with 360p and 720p renditions', () => makeHls(media));
  const thirdParty = join(tmp, 'page');
  mkdirSync(thirdParty);
  writeFileSync(join(thirdParty, 'third-party.html'), THIRD_PARTY_PAGE);
  const statics = await serveStatic({
    '/media': media,
    '/page': thirdParty,
  });
  cleanups.push(statics.close);

  const base = await check('streamwatch is ready (/readyz)', () => startStreamwatch(join(tmp, 'data')));

  const cookie = await check('sign up (POST /api/auth/sign-up/email) gives the session cookie', async () => {
    const email = `e2e-${Date.now()}@example.com`;
    const r = await api(base, 'POST', '/api/auth/sign-up/email', { body: { name: 'E2E', email, password: 'correct-horse-battery' } });
    assert(r.status === 200, `sign-up answered ${r.status}: ${r.text}`);
    const set = r.res.headers.getSetCookie().find((c) => c.startsWith('auth.session_token='));
    assert(set, 'no auth.session_token in Set-Cookie');
    return set.split(';')[0];
  });

  const key = await check('mint an API key (POST /api/v1/keys) → 201 rawKey', async () => {
    const r = await api(base, 'POST', '/api/v1/keys', { cookie, body: { label: 'player-sdk e2e' } });
    assert(r.status === 201, `keys answered ${r.status}: ${r.text}`);
    assert(typeof r.json?.rawKey === 'string' && r.json.rawKey.startsWith('svc_'), `no svc_ rawKey in ${r.text}`);
    return r.json.rawKey;
  });

  await check('streamwatch serves the SDK bundles and the demo page (with a CSP)', async () => {
    for (const p of ['/sdk/@service/player-sdk@0.1.0/dist/index.js', '/sdk/@service/player-sdk@0.2.0/dist/index.js', '/demo/player.html']) {
      const r = await fetch(base + p);
      assert(r.status === 200, `GET ${p} answered ${r.status}`);
    }
    const csp = (await fetch(`${base}/demo/player.html`)).headers.get('content-security-policy') || '';
    assert(csp.includes("script-src 'self'") && !csp.includes('unsafe-inline'), `CSP ${csp}`);
  });

  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  const logs = [];
  // Every host the demo page talks to, every CSP violation and every console error.
  const origins = new Set();
  const problems = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.protocol === 'http:' || u.protocol === 'https:') origins.add(u.origin);
  });
  page.on('console', (m) => m.type() === 'error' && problems.push(`console error: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.addInitScript(() =>
    document.addEventListener('securitypolicyviolation', (e) =>
      console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`),
    ),
  );
  page.on('console', (m) => logs.push(`[console.${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  page.on('requestfailed', (r) => logs.push(`[requestfailed] ${r.method()} ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => r.url().includes('/api/v1/telemetry') && logs.push(`[telemetry] ${r.request().method()} ${r.status()}`));
  diagnostics.push(() => ['browser log:', ...logs.slice(-80)]);

  const q = new URLSearchParams({
    src: `${statics.url}/media/master.m3u8`,
    key,
    content: 'e2e-testsrc',
  });
  await check('demo page loads, hls.js plays, SDK attached', async () => {
    await page.goto(`${base}/demo/player.html?${q}`);
    await page.waitForFunction(() => window.__sw && window.__sw.hls, null, { timeout: 15_000 });
    await page.evaluate(() => {
      window.__switches = [];
      window.__sw.hls.on('hlsLevelSwitched', (_e, d) => window.__switches.push(d.level));
    });
    await page.waitForFunction(() => !window.__sw.video.paused && window.__sw.video.currentTime > 0.3, null, {
      timeout: 20_000,
    });
  });
  const sessionId = await page.evaluate(() => window.__sw.telemetry.sessionId);

  await check('pause, then resume', async () => {
    await page.evaluate(() => window.__sw.video.pause());
    await sleep(400);
    await page.evaluate(() => window.__sw.video.play());
    await page.waitForFunction(() => !window.__sw.video.paused, null, { timeout: 5_000 });
  });

  await check('force a rendition switch (hls.currentLevel)', async () => {
    const target = await page.evaluate(() => {
      const hls = window.__sw.hls;
      const to = hls.currentLevel === 1 ? 0 : 1;
      hls.currentLevel = to;
      return to;
    });
    await page.waitForFunction((to) => window.__switches.at(-1) === to, target, { timeout: 15_000 });
  });

  await check('play to the end', () =>
    page.waitForFunction(() => window.__sw.video.ended, null, { timeout: 45_000 }),
  );

  await check('the page reached only streamwatch and the media origin, with no CSP violation or console error', () => {
    const allowed = new Set([base, statics.url]);
    const foreign = [...origins].filter((o) => !allowed.has(o));
    assert(foreign.length === 0, `requests to ${foreign.join(', ')}`);
    assert(origins.has(base) && origins.has(statics.url), `origins seen: ${[...origins].join(', ')}`);
    assert(problems.length === 0, problems.join('; '));
  });

  await check('a script URL in the query string (?hls=data:…) is never loaded', async () => {
    const evil = await browser.newPage();
    const seen = [];
    evil.on('request', (r) => seen.push(r.url()));
    const attack = new URLSearchParams({ src: `${statics.url}/media/master.m3u8`, key, hls: 'data:text/javascript,window.__pwned=1' });
    await evil.goto(`${base}/demo/player.html?${attack}`);
    await evil.waitForFunction(() => window.__sw && window.__sw.hls, null, { timeout: 15_000 });
    assert((await evil.evaluate(() => window.__pwned)) === undefined, 'the query-string script ran');
    assert(!seen.some((u) => u.startsWith('data:')), 'a data: URL was requested');
    await evil.close();
  });

  const items = await check(`read the session back (GET /api/v1/telemetry/sessions/${sessionId}/events)`, () =>
    waitFor(
      'session_end in the stored events',
      async () => {
        const r = await api(base, 'GET', `/api/v1/telemetry/sessions/${encodeURIComponent(sessionId)}/events`, { cookie });
        assert(r.status === 200, `answered ${r.status}: ${r.text}`);
        assert(Array.isArray(r.json?.items), `no items array in ${r.text}`);
        return r.json.items.some((e) => e.type === 'session_end') && r.json.items;
      },
      20_000,
      500,
    ),
  );
  console.log(`        stored: ${items.map((e) => e.type).join(', ')}`);

  await check('events are { type, ts, payload } in ascending ts', () => {
    for (const e of items) {
      assert(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(e.ts), `bad ts ${e.ts}`);
      assert(e.payload && typeof e.payload === 'object', `no payload on ${JSON.stringify(e)}`);
    }
    for (let i = 1; i < items.length; i++) assert(items[i - 1].ts <= items[i].ts, `ts out of order at ${i}`);
  });

  await check(`${ORDER.join(' → ')} appear in that order`, () => {
    let at = -1;
    for (const type of ORDER) {
      const i = items.findIndex((e, j) => j > at && e.type === type);
      assert(i >= 0, `no ${type} after ${at >= 0 ? items[at].type : 'the start'}`);
      at = i;
    }
  });

  await check('SDK 0.2.0: startupMs on playback_start, an initial quality_change with from "" and its size', () => {
    const start = items.find((e) => e.type === 'playback_start').payload;
    assert(typeof start.startupMs === 'number' && start.startupMs > 0, `startupMs ${start.startupMs}`);
    const first = items.find((e) => e.type === 'quality_change').payload;
    assert(first.from === '' && /^\d+p$/.test(first.to), `initial quality_change ${JSON.stringify(first)}`);
    assert(first.width > 0 && first.height > 0 && first.bitrate > 0, `size ${JSON.stringify(first)}`);
  });

  await check('payloads carry the played content, rendition labels and the end reason', () => {
    const start = items.find((e) => e.type === 'playback_start').payload;
    assert(start.contentId === 'e2e-testsrc', `contentId ${start.contentId}`);
    assert(start.durationMs > 7000 && start.durationMs < 9000, `durationMs ${start.durationMs}`);
    const q = items.filter((e) => e.type === 'quality_change').at(-1).payload;
    assert(/^\d+p$/.test(q.from) && /^\d+p$/.test(q.to) && q.from !== q.to, `labels ${q.from} → ${q.to}`);
    assert(q.bitrate > 0, `bitrate ${q.bitrate}`);
    const end = items.filter((e) => e.type === 'session_end');
    assert(end.length === 1 && end[0].payload.reason === 'ended', `session_end ${JSON.stringify(end)}`);
  });

  await check('leaving the page sends session_end (unloaded) with a keepalive request on pagehide', async () => {
    const second = await browser.newPage();
    await second.goto(`${base}/demo/player.html?${q}`);
    await second.waitForFunction(() => window.__sw && !window.__sw.video.paused && window.__sw.video.currentTime > 0.3, null, {
      timeout: 20_000,
    });
    const id = await second.evaluate(() => window.__sw.telemetry.sessionId);
    await second.goto('about:blank');
    const stored = await waitFor(
      'session_end in the second session',
      async () => {
        const r = await api(base, 'GET', `/api/v1/telemetry/sessions/${encodeURIComponent(id)}/events`, { cookie });
        return r.status === 200 && r.json.items.some((e) => e.type === 'session_end') && r.json.items;
      },
      20_000,
      500,
    );
    const types = stored.map((e) => e.type);
    // Before the first frame only the initial rendition (quality_change from "") may come.
    const start = types.indexOf('playback_start');
    assert(start >= 0, `no playback_start in ${types.join(', ')}`);
    assert(
      stored.slice(0, start).every((e) => e.type === 'quality_change' && e.payload.from === ''),
      `before playback_start: ${types.slice(0, start).join(', ')}`,
    );
    const end = stored.filter((e) => e.type === 'session_end');
    assert(end.length === 1 && end[0].payload.reason === 'unloaded', `session_end ${JSON.stringify(end)}`);
  });

  await check('a stall forced by the origin shows as a view in /api/v1/qoe/views: startupMs > 0, rebufferCount ≥ 1, Chrome, streamId of the registered stream', async () => {
    const src = `${statics.url}/media/master.m3u8`;
    const r = await api(base, 'POST', '/api/v1/streams', { cookie, body: { sourceUrl: src, name: 'e2e media' } });
    assert(r.status === 201, `registering the stream answered ${r.status}: ${r.text}`);
    const streamId = r.json.id;
    // The origin holds the third segment (media time 4–6 s) of every rendition: playback
    // must stall there, whatever the machine's speed. Released once the page has stalled.
    statics.hold(/^\/media\/v\d+\/seg2\.ts$/);
    const stall = await browser.newPage();
    stall.on('console', (m) => logs.push(`[stall console.${m.type()}] ${m.text()}`));
    await stall.addInitScript(() => {
      window.__waits = [];
      // Media events do not bubble, but capture listeners on the document see them.
      document.addEventListener('waiting', (e) => window.__waits.push(e.target.currentTime), true);
    });
    await stall.goto(`${base}/demo/player.html?${new URLSearchParams({ src, key, content: 'e2e-stall' })}`);
    await stall.waitForFunction(() => window.__sw && window.__sw.video.currentTime > 1 && window.__waits.some((t) => t > 1), null, {
      timeout: 40_000,
    });
    statics.release();
    await stall.waitForFunction(() => window.__sw.video.ended, null, { timeout: 45_000 });
    const id = await stall.evaluate(() => window.__sw.telemetry.sessionId);
    await stall.close();
    const view = await waitFor(
      `view ${id} in /api/v1/qoe/views`,
      async () => {
        const v = await api(base, 'GET', '/api/v1/qoe/views?limit=1000', { cookie });
        assert(v.status === 200, `views answered ${v.status}: ${v.text}`);
        const found = v.json.items.find((i) => i.sessionId === id);
        // Complete once the whole 8 s were watched (a view is re-derived as its batches arrive).
        return found && found.watchTimeMs >= 7000 && found;
      },
      30_000,
      500,
    );
    console.log(`        view: ${JSON.stringify(view)}`);
    assert(view.startupMs > 0, `startupMs ${view.startupMs}`);
    assert(view.rebufferCount >= 1 && view.rebufferMs > 0, `rebufferCount ${view.rebufferCount}, rebufferMs ${view.rebufferMs}`);
    assert(view.browser === 'Chrome', `browser ${view.browser}`);
    assert(view.streamId === streamId, `streamId ${view.streamId}, registered ${streamId}`);
    assert(view.src === src && view.contentId === 'e2e-stall', `src ${view.src}, contentId ${view.contentId}`);
    assert(view.sdk === '@service/player-sdk@0.2.0' && /^hls\.js /.test(view.player), `sdk ${view.sdk}, player ${view.player}`);
    assert(view.started && !view.failed && view.avgBitrateKbps > 0, JSON.stringify(view));
    // The same view counts in the stream's timeline, next to its probes.
    const t = await api(base, 'GET', `/api/v1/streams/${streamId}/timeline?granularity=hour`, { cookie });
    assert(t.status === 200, `timeline answered ${t.status}: ${t.text}`);
    assert(t.json.items.some((i) => i.viewers.views >= 1), `no viewers in ${t.text}`);
  });

  await check('a player page on another origin loads the pinned SDK 0.1.0 from streamwatch and its batches are stored (CORS)', async () => {
    const other = await browser.newPage();
    other.on('console', (m) => logs.push(`[third-party console.${m.type()}] ${m.text()}`));
    await other.goto(`${statics.url}/page/third-party.html?${new URLSearchParams({ sw: base, key })}`);
    const done = await other.waitForFunction(() => window.__done, null, { timeout: 15_000 }).then((h) => h.jsonValue());
    assert(!done.failed, `importing the SDK cross-origin failed: ${done.failed} (needs Access-Control-Allow-Origin on /sdk/)`);
    const stored = await waitFor(
      'the third-party session',
      async () => {
        const r = await api(base, 'GET', `/api/v1/telemetry/sessions/${encodeURIComponent(done.sessionId)}/events`, { cookie });
        return r.status === 200 && r.json.items.length >= 2 && r.json.items;
      },
      10_000,
      500,
    ).catch(() => {
      throw new Error('nothing stored: the cross-origin POST (CORS preflight on /api/v1/telemetry) was refused');
    });
    assert(
      stored.map((e) => e.type).join() === 'error,session_end',
      `stored ${stored.map((e) => e.type).join(', ')}`,
    );
  });
}

let failed = false;
try {
  await main();
} catch (e) {
  failed = true;
  if (!results.some((r) => !r.ok)) {
    results.push({ name: 'harness', ok: false, error: e });
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
const nFailed = results.length - passed;
console.log(`\ne2e: ${passed} passed, ${nFailed} failed`);
process.exit(failed || nFailed ? 1 : 0);
