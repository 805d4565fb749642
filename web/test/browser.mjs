//! Real-browser test of the dashboard module: Debian's Chromium (playwright-core, never a
//! downloaded browser) opens the fixture pages served by test/fixture-server.mjs with the
//! server's page CSP and checks what a person would: charts drawn (and their empty and error
//! sentences), local times, forms against the JSON API, the confirm dialog by keyboard, copy,
//! key reveal, autosubmit, 375 px screens, light and dark, axe-core (WCAG 2.1 AA); on every page
//! no console error, no CSP violation and no request off the origin. Screenshots go to
//! test/screenshots/ (gitignored) for a person to look at.
//!
//! Env: CHROMIUM_BIN (default /usr/bin/chromium).

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { NEW_STREAM_ID, RAW_KEY, startFixtureServer } from './fixture-server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const shots = join(here, 'screenshots');
mkdirSync(shots, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--headless',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
/** A zone with a half-hour offset, so a missed conversion cannot pass by luck. */
const ZONE = 'Asia/Kolkata';
const PAGES = ['/app', '/app/streams', `/app/streams/cl_stream1`, '/app/qoe', '/app/keys', '/app/chart-states', '/app/one-bucket'];
/** Loads that fail on purpose (Chromium logs each as a console error). */
const EXPECTED_FAILURES = [/\/api\/v1\/qoe\/timeseries\?metric=broken/, /\/api\/v1\/agents\?drop=1/];

const server = await startFixtureServer();
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_BIN || '/usr/bin/chromium', args: CHROMIUM_ARGS });
const results = [];

const assert = (cond, msg) => {
  if (!cond) throw new Error(msg);
};
const eq = (actual, expected, what) =>
  assert(JSON.stringify(actual) === JSON.stringify(expected), `${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);

async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push(true);
    console.log(`  ok    ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.push(false);
    console.log(`  FAIL  ${name}: ${e && e.stack}`);
  }
}

function newContext(options = {}) {
  return browser.newContext({
    viewport: { width: 1280, height: 900 },
    timezoneId: ZONE,
    locale: 'en-US',
    colorScheme: 'light',
    ...options,
  });
}

/**
 * Opens a page and watches it: console errors, page errors, CSP violations (reported by the
 * page itself through `securitypolicyviolation`) and requests to any other origin.
 */
async function open(context, path, allowFailures = []) {
  const page = await context.newPage();
  const problems = [];
  const allowed = (text, url) => /^Failed to load resource/.test(text) && [...EXPECTED_FAILURES, ...allowFailures].some((re) => re.test(url));
  page.on('console', (m) => {
    if (m.type() === 'error' && !allowed(m.text(), m.location().url)) problems.push(`console error: ${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    if (!r.url().startsWith(server.url)) problems.push(`request off the origin: ${r.url()}`);
  });
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective}: ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
  });
  await page.goto(server.url + path);
  await settled(page);
  return {
    page,
    async clean() {
      const csp = await page.evaluate(() => window.__csp).catch(() => []);
      const all = [...problems, ...csp.map((c) => `CSP violation: ${c}`)];
      assert(all.length === 0, `${path}:\n    ${all.join('\n    ')}`);
    },
  };
}

/** Charts have left their loading state. */
async function settled(page) {
  await page.waitForFunction(() => Array.from(document.querySelectorAll('figure[data-chart]')).every((f) => f.dataset.chartState && f.dataset.chartState !== 'loading'));
}

const shotName = (path, variant) => `${(path.replace(/^\/app\/?/, '') || 'overview').replace(/\//g, '-')}-${variant}.png`;

async function axe(page, label) {
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } });
    return r.violations.map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')} — ${v.nodes[0]?.failureSummary?.split('\n')[1] ?? ''}`);
  });
  assert(violations.length === 0, `axe ${label}:\n    ${violations.join('\n    ')}`);
}

const light = await newContext();
await light.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });

console.log(`browser test against ${server.url} (CSP: ${server.csp})`);

await check('every chart kind draws a canvas no wider than its figure', async () => {
  for (const [path, kinds] of [
    ['/app', ['sparkline', 'sparkline', 'sparkline', 'sparkline']],
    ['/app/streams/cl_stream1', ['latency', 'timeline']],
    ['/app/qoe', ['timeseries', 'timeseries']],
  ]) {
    const { page, clean } = await open(light, path);
    const drawn = await page.$$eval('figure[data-chart]', (figs) =>
      figs.map((f) => {
        const c = f.querySelector('.chart-plot canvas');
        return { kind: f.dataset.chart, state: f.dataset.chartState, canvas: c ? c.getBoundingClientRect().width : 0, fig: f.getBoundingClientRect().width, hidden: f.querySelector('.chart-plot')?.getAttribute('aria-hidden') };
      }),
    );
    eq(drawn.map((d) => d.kind), kinds, `${path} chart kinds`);
    for (const d of drawn) {
      assert(d.state === 'drawn' && d.canvas > 0, `${path}: ${d.kind} not drawn (${JSON.stringify(d)})`);
      assert(d.canvas <= d.fig, `${path}: ${d.kind} canvas ${d.canvas}px wider than its figure ${d.fig}px`);
      assert(d.hidden === 'true', `${path}: ${d.kind} plot is not aria-hidden`);
    }
    // The figure keeps its accessible name.
    assert((await page.$$('figure[data-chart] > figcaption')).length === kinds.length, `${path}: a figcaption went missing`);
    await page.screenshot({ path: join(shots, shotName(path, 'light')), fullPage: true });
    await clean();
    await page.close();
  }
});

await check('empty data and failed loads show a sentence, not a blank chart', async () => {
  const { page, clean } = await open(light, '/app/chart-states');
  const states = await page.$$eval('figure[data-chart]', (figs) =>
    Object.fromEntries(figs.map((f) => [f.id, [f.dataset.chartState, f.querySelector('.chart-message')?.textContent, !!f.querySelector('canvas')]])),
  );
  eq(states, {
    'empty-timeseries': ['empty', 'No views in this time range.', false],
    'empty-latency': ['empty', 'No probes for this stream yet.', false],
    'empty-timeline': ['empty', 'No probes and no views in this time range.', false],
    'error-500': ['error', 'Could not load the chart data (HTTP 500).', false],
    'error-network': ['error', 'Could not load the chart data (network error).', false],
    'empty-sparkline': ['empty', 'No data', false],
  }, 'chart states');
  await page.screenshot({ path: join(shots, shotName('/app/chart-states', 'light')), fullPage: true });
  await clean();
  await page.close();
});

/**
 * The marks of one series in a chart's canvas: pixels drawn opaque in the color of the CSS
 * variable `cssVar` (the series' color), their count in CSS pixels and their bounding box.
 * `upper`: only the upper half of the plot (a value above the zero line).
 */
async function marks(page, selector, cssVar, { upper = false } = {}) {
  return page.$eval(
    selector,
    (fig, [v, up]) => {
      const hex = getComputedStyle(fig).getPropertyValue(v).trim();
      const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
      const c = fig.querySelector('.chart-plot canvas');
      if (!c) return { count: 0, box: null, width: 0, height: 0 };
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      let box = null;
      for (let y = 0; y < (up ? c.height / 2 : c.height); y++) {
        for (let x = 0; x < c.width; x++) {
          const i = 4 * (y * c.width + x);
          if (d[i + 3] > 200 && Math.abs(d[i] - r) + Math.abs(d[i + 1] - g) + Math.abs(d[i + 2] - b) < 40) {
            n++;
            box = box ? [Math.min(box[0], x), Math.min(box[1], y), Math.max(box[2], x), Math.max(box[3], y)] : [x, y, x, y];
          }
        }
      }
      return { count: n / devicePixelRatio ** 2, box, width: c.width, height: c.height };
    },
    [cssVar, upper],
  );
}

await check('a series of one non-empty bucket draws visible marks: charts, timeline lines and whole sparkline dots (light, dark, 375 px)', async () => {
  const narrowCtx = await newContext({ viewport: { width: 375, height: 812 }, deviceScaleFactor: 2 });
  const darkCtx = await newContext({ colorScheme: 'dark' });
  for (const [context, variant] of [[light, 'light'], [darkCtx, 'dark'], [narrowCtx, '375']]) {
    const { page, clean } = await open(context, '/app/one-bucket');
    const states = await page.$$eval('figure[data-chart]', (figs) => figs.map((f) => [f.id, f.dataset.chartState]));
    eq(states, [['one-views', 'drawn'], ['one-failures', 'drawn'], ['one-timeline', 'drawn'], ['one-probe', 'drawn'], ['one-spark-views', 'drawn'], ['one-spark-failures', 'drawn']], `${variant}: chart states`);
    // One probe: a dot in the middle of a few minutes' axis (not at the edge of a years-wide one).
    const severity = (await (await fetch(`${server.url}/api/v1/agents?one=1`)).json()).items[0].severity;
    const dotVar = { info: '--status-healthy', warn: '--status-degraded', critical: '--status-failing' }[severity];
    const dot = await marks(page, '#one-probe', dotVar);
    const centre = (dot.box[0] + dot.box[2]) / 2;
    assert(dot.count >= 12 && Math.abs(centre - dot.width / 2) < dot.width * 0.15, `${variant}: the one probe is drawn at x ${centre} of ${dot.width} (${JSON.stringify(dot)})`);
    for (const [id, cssVar, opts] of [
      ['one-views', '--chart-line', { upper: true }],
      ['one-failures', '--chart-line', {}],
      ['one-timeline', '--chart-line', {}],
      ['one-timeline', '--chart-third', {}],
      ['one-spark-views', '--chart-line', { upper: true }],
      ['one-spark-failures', '--chart-line', {}],
    ]) {
      const m = await marks(page, `#${id}`, cssVar, opts);
      // A 5 px dot covers about 20 px²; a stroke up to a value, more.
      assert(m.count >= 12, `${variant}: #${id} draws ${m.count} px of ${cssVar} (${JSON.stringify(m)})`);
      // Whole, not a half-dot cut by the plot's edge.
      assert(m.box[0] > 0 && m.box[2] < m.width - 1, `${variant}: #${id} ${cssVar} mark touches the canvas edge: ${JSON.stringify(m)}`);
    }
    await page.screenshot({ path: join(shots, shotName('/app/one-bucket', variant)), fullPage: true });
    await clean();
    await page.close();
  }
  await narrowCtx.close();
  await darkCtx.close();
});

await check(`times are shown in the viewer's zone (${ZONE}) with UTC in the title`, async () => {
  const { page, clean } = await open(light, '/app');
  const fired = await page.$eval('time[datetime="2026-11-23T03:05:00.000Z"]', (t) => [t.textContent, t.title]);
  eq(fired, ['11/23/26, 8:35 AM', '2026-11-23 03:05:00 UTC'], 'absolute time');
  const rel = await page.$eval('time[data-relative]', (t) => [t.textContent, t.title]);
  assert(/ago$|^yesterday$|^now$/.test(rel[0]), `relative time reads "${rel[0]}"`);
  eq(rel[1], '11/23/26, 5:30 PM (2026-11-23 12:00:00 UTC)', 'relative time title');
  await clean();
  await page.close();
});

await check('a form shows field errors from a 400 beside the field, then follows data-redirect on 201', async () => {
  const { page, clean } = await open(light, '/app/streams', [/\/api\/v1\/streams$/]);
  await page.fill('#sourceUrl', 'http://10.0.0.5/live/master.m3u8');
  await page.click('#add-stream button[type="submit"]');
  assert(await page.$eval('#add-stream button[type="submit"]', (b) => b.disabled), 'submit button not disabled in flight');
  await page.waitForSelector('[data-error-for="sourceUrl"]:not(:empty)');
  const field = await page.$eval('#sourceUrl', (el) => {
    const err = document.querySelector('[data-error-for="sourceUrl"]');
    return {
      message: err.textContent,
      invalid: el.getAttribute('aria-invalid'),
      describedby: el.getAttribute('aria-describedby'),
      errId: err.id,
      focused: document.activeElement === el,
      afterField: el.closest('.field').contains(err),
    };
  });
  eq(field.message, 'Hostname resolves to a private address (10.0.0.5)', 'field message');
  eq(field.invalid, 'true', 'aria-invalid');
  eq(field.describedby, `sourceUrl-hint ${field.errId}`, 'aria-describedby keeps the hint and adds the error');
  assert(field.focused, 'the invalid field does not have the focus');
  assert(field.afterField, 'the message is not beside its field');
  assert(!(await page.$eval('#add-stream button[type="submit"]', (b) => b.disabled)), 'submit button stays disabled');
  await page.screenshot({ path: join(shots, 'streams-field-error.png') });

  // Editing the field clears its message; a good URL creates the stream and goes to its page.
  await page.fill('#sourceUrl', 'https://cdn.example.com/news/master.m3u8');
  assert((await page.$('[data-error-for="sourceUrl"]')) === null, 'message stays after editing the field');
  assert((await page.$eval('#sourceUrl', (el) => el.getAttribute('aria-describedby'))) === 'sourceUrl-hint', 'describedby not restored');
  await page.fill('#name', 'News channel');
  await clean();
  await Promise.all([page.waitForURL(`**/app/streams/${NEW_STREAM_ID}`), page.press('#name', 'Enter')]);
  const post = server.requests.filter((r) => r.method === 'POST' && r.path === '/api/v1/streams').at(-1);
  eq(post.body, { sourceUrl: 'https://cdn.example.com/news/master.m3u8', name: 'News channel' }, 'POST body (empty region omitted)');
  eq(post.contentType, 'application/json', 'content type');
  await settled(page);
  await clean();
  await page.close();
});

await check('a server failure shows one form-level message', async () => {
  const { page, clean } = await open(light, '/app/keys', [/\/api\/v1\/keys$/]);
  await page.fill('#label', 'boom');
  await page.press('#label', 'Enter');
  await page.waitForSelector('[data-form-error]:not(:empty)');
  const formError = await page.$eval('[data-form-error]', (el) => [el.textContent, el.getAttribute('role')]);
  eq(formError, ['The server failed to do this. Try again in a moment.', 'alert'], 'form error');
  // Styled as a message box (the template writes a bare <div data-form-error>).
  const look = await page.$eval('[data-form-error]', (el) => {
    const cs = getComputedStyle(el);
    const danger = getComputedStyle(document.documentElement).getPropertyValue('--danger').trim();
    const probe = document.createElement('span');
    probe.style.color = danger;
    document.body.append(probe);
    const dangerRgb = getComputedStyle(probe).color;
    probe.remove();
    return { border: cs.borderLeftWidth, colored: cs.color === dangerRgb };
  });
  eq(look, { border: '4px', colored: true }, 'form-level message style');
  await page.screenshot({ path: join(shots, 'keys-form-error.png') });
  await clean();
  await page.close();
});

await check('the confirm dialog works by keyboard: focus trapped, Escape cancels, focus restored', async () => {
  const { page, clean } = await open(light, '/app/keys');
  const revoke = 'button[data-href="/api/v1/keys/cl_key1"]';
  const deletes = () => server.requests.filter((r) => r.method === 'DELETE' && r.path === '/api/v1/keys/cl_key1').length;
  const before = deletes();
  const focused = () => page.evaluate(() => document.activeElement?.textContent?.trim());
  await page.focus(revoke);
  await page.keyboard.press('Enter');
  await page.waitForSelector('dialog.confirm-dialog[open]');
  eq(await page.$eval('dialog.confirm-dialog p', (p) => p.textContent), 'Revoke key “web player”? Players using it stop sending telemetry at once.', 'question');
  eq(await focused(), 'Cancel', 'first focus (the safe choice)');
  await page.keyboard.press('Tab');
  eq(await focused(), 'Revoke', 'Tab');
  await page.keyboard.press('Tab');
  eq(await focused(), 'Cancel', 'Tab wraps inside the dialog');
  await page.keyboard.press('Shift+Tab');
  eq(await focused(), 'Revoke', 'Shift+Tab wraps back');
  await page.screenshot({ path: join(shots, 'keys-confirm-dialog.png') });
  await page.keyboard.press('Escape');
  await page.waitForSelector('dialog.confirm-dialog:not([open])', { state: 'attached' });
  assert(await page.$eval(revoke, (b) => document.activeElement === b), 'focus not back on the Revoke button');
  eq(deletes(), before, 'DELETE sent although cancelled');

  await page.keyboard.press('Enter');
  await page.waitForSelector('dialog.confirm-dialog[open]');
  await page.keyboard.press('Tab');
  await Promise.all([page.waitForEvent('load'), page.keyboard.press('Enter')]);
  eq(deletes(), before + 1, 'DELETE requests after confirming');
  await settled(page);
  await clean();
  await page.close();
});

await check('minting a key shows the raw key once, focused, stored nowhere; copy puts it on the clipboard', async () => {
  const { page, clean } = await open(light, '/app/keys');
  const url = page.url();
  await page.fill('#label', 'CI smoke');
  await page.press('#label', 'Enter');
  await page.waitForSelector('.reveal');
  const shown = await page.evaluate(() => ({
    key: document.querySelector('#raw-key').textContent,
    snippet: document.querySelector('#sdk-snippet').textContent,
    focused: document.activeElement?.classList.contains('reveal'),
    created: [document.querySelector('.reveal time').textContent, document.querySelector('.reveal time').title],
    stored: localStorage.length + sessionStorage.length,
    label: document.querySelector('#label').value,
  }));
  eq(shown.key, RAW_KEY, 'raw key');
  assert(shown.snippet.includes(`apiKey: '${RAW_KEY}'`), 'snippet lacks the key');
  assert(shown.focused, 'the revealed key does not have the focus');
  eq(shown.created, ['11/23/26, 5:30 PM', '2026-11-23 12:00:00 UTC'], 'created time localized');
  eq(shown.stored, 0, 'web storage entries');
  eq(shown.label, '', 'label field after minting');
  eq(page.url(), url, 'page URL');
  await page.click('.reveal button[data-copy="#raw-key"]');
  await page.waitForFunction(() => document.querySelector('.toast-region')?.textContent === 'Copied');
  eq(await page.evaluate(() => navigator.clipboard.readText()), RAW_KEY, 'clipboard');
  eq(await page.$eval('.toast-region', (r) => [r.getAttribute('role'), r.getAttribute('aria-live')]), ['status', 'polite'], 'live region');
  await page.screenshot({ path: join(shots, 'keys-revealed.png'), fullPage: true });
  await clean();
  await page.close();
});

await check('a data-stay PATCH form announces success and stays', async () => {
  const { page, clean } = await open(light, '/app/streams/cl_stream1');
  const url = page.url();
  await page.fill('#edit-name', 'Main channel HD');
  await page.click('text=Save');
  await page.waitForFunction(() => document.querySelector('.toast-region')?.textContent === 'Stream saved');
  const patch = server.requests.filter((r) => r.method === 'PATCH').at(-1);
  eq([patch.path, patch.body], ['/api/v1/streams/cl_stream1', { name: 'Main channel HD', targetRegion: 'eu-west' }], 'PATCH');
  eq(page.url(), url, 'page URL');
  await clean();
  await page.close();
});

await check('filters submit on change and land in the URL', async () => {
  const { page, clean } = await open(light, '/app/qoe');
  await Promise.all([page.waitForURL(/range=7d/), page.selectOption('#range', '7d')]);
  assert(page.url().includes('filter='), 'all filter fields in the URL');
  await settled(page);
  await clean();
  await page.close();
});

await check('charts are redrawn for a color-scheme change and a narrower window', async () => {
  const { page, clean } = await open(light, '/app/streams/cl_stream1');
  await page.evaluate(() => (window.__canvas = document.querySelector('figure[data-chart="timeline"] canvas')));
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.waitForFunction(() => {
    const c = document.querySelector('figure[data-chart="timeline"] canvas');
    return c && c !== window.__canvas;
  });
  await page.setViewportSize({ width: 375, height: 800 });
  await page.waitForFunction(() =>
    Array.from(document.querySelectorAll('figure[data-chart]')).every((f) => f.querySelector('canvas').getBoundingClientRect().width <= f.getBoundingClientRect().width),
  );
  assert((await page.evaluate(() => document.documentElement.scrollWidth)) <= 375, 'horizontal overflow after resize');
  await clean();
  await page.close();
});

const dark = await newContext({ colorScheme: 'dark' });
await check('every page in dark mode: drawn, clean, screenshots', async () => {
  for (const path of PAGES) {
    const { page, clean } = await open(dark, path);
    await page.screenshot({ path: join(shots, shotName(path, 'dark')), fullPage: true });
    await clean();
    await page.close();
  }
});

const narrow = await newContext({ viewport: { width: 375, height: 812 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
await check('no horizontal scroll at 375 px on any page', async () => {
  for (const path of PAGES) {
    const { page, clean } = await open(narrow, path);
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert(width <= 375, `${path}: scrollWidth ${width} > 375`);
    await page.screenshot({ path: join(shots, shotName(path, '375')), fullPage: true });
    await clean();
    await page.close();
  }
});

await check('axe-core finds no WCAG 2.1 AA violation, light and dark', async () => {
  for (const [context, scheme] of [[light, 'light'], [dark, 'dark']]) {
    for (const path of PAGES) {
      const { page, clean } = await open(context, path);
      await axe(page, `${path} (${scheme})`);
      await clean();
      await page.close();
    }
  }
});

await browser.close();
await server.close();
const passed = results.filter(Boolean).length;
console.log(`browser: ${passed} passed, ${results.length - passed} failed`);
process.exit(passed === results.length ? 0 : 1);
