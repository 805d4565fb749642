//! A tiny stand-in for streamwatch in the browser test: serves web/dist at /assets/, the fixture
//! pages (what the askama templates will render) at their /app/… paths with the server's own
//! page CSP, and the JSON API from fixture bodies shaped as in the specs. It records every API
//! request so the test can check what the module sent.

import { readFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const webRoot = join(dirname(fileURLToPath(import.meta.url)), '..');
const fixtures = join(webRoot, 'test/fixtures');

/** PAGE_CSP exactly as src/http/security.rs sends it (a Rust string with `\` line continuations). */
export function pageCsp() {
  const rust = readFileSync(join(webRoot, '../src/http/security.rs'), 'utf8');
  const m = rust.match(/pub const PAGE_CSP: &str = "((?:[^"\\]|\\[\s\S])*)";/);
  if (!m) throw new Error('PAGE_CSP not found in src/http/security.rs');
  return m[1].replace(/\\\n\s*/g, '');
}

const PAGES = {
  '/app': 'overview.html',
  '/app/streams': 'streams.html',
  '/app/qoe': 'qoe.html',
  '/app/keys': 'keys.html',
  '/app/chart-states': 'chart-states.html',
  '/app/one-bucket': 'one-bucket.html',
};
/** A stream id (cl_…) that a POST in the test creates and redirects to. */
export const NEW_STREAM_ID = 'cl_new01';
export const RAW_KEY = 'svc_4f9c2b7e1d8a4c0b9e6f3a2d5c8b1e7f';

const PRIVATE_HOST = /^(localhost|127\.|10\.|192\.168\.|172\.(1[6-9]|2\d|3[01])\.|169\.254\.)/;

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(body === undefined ? '' : JSON.stringify(body));
}

function fixture(name) {
  return JSON.parse(readFileSync(join(fixtures, 'api', name), 'utf8'));
}

function streamItem(body, id) {
  return {
    id,
    sourceUrl: body.sourceUrl ?? 'https://cdn.example.com/live/main/master.m3u8',
    name: body.name ?? '',
    targetRegion: body.targetRegion ?? '',
    createdAt: '2026-11-23T12:00:00.000Z',
    agentState: 'healthy',
    status: 'watching',
    lastAction: 'registered',
    lastCheckedAt: null,
    uptimePct: 100,
  };
}

/** The 60 minute buckets of a new install's last hour; views arrived in the last one only. */
const ONE_HOUR = Array.from({ length: 60 }, (_, i) => new Date(Date.UTC(2026, 10, 23, 11, i)).toISOString());

/** A time series with one non-empty bucket, the last (analytics.md v1.2: `views` answers 0 elsewhere). */
function oneBucketSeries(metric) {
  const value = { views: 3, playbackFailurePct: 33.33, rebufferPct: 1.2, startupTimeMs: 910 }[metric] ?? 1;
  const last = ONE_HOUR.length - 1;
  return {
    metric,
    granularity: 'minute',
    items: ONE_HOUR.map((t, i) => (i === last ? { t, value, views: 3 } : { t, value: metric === 'views' ? 0 : null, views: 0 })),
  };
}

/** A stream probed every minute for an hour, with viewers in one minute only. */
function oneBucketTimeline() {
  const watched = 42;
  return {
    items: ONE_HOUR.map((t, i) => ({
      t,
      probes: { healthy: 2, degraded: 0, failing: 0, p50LatencyMs: 120 },
      viewers:
        i === watched
          ? { views: 3, playbackFailurePct: 33.33, rebufferPct: 1.2, startupTimeMs: 910 }
          : { views: 0, playbackFailurePct: null, rebufferPct: null, startupTimeMs: null },
    })),
  };
}

/** The API routes the fixture pages use; each answers as the contract says. */
async function api(req, res, url, body, sleep) {
  const route = `${req.method} ${url.pathname}`;
  const q = url.searchParams;
  if (route === 'GET /api/v1/qoe/timeseries') {
    const metric = q.get('metric');
    if (metric === 'broken') return json(res, 500, { error: 'Internal Server Error' });
    if (q.get('range') === 'empty') return json(res, 200, { ...fixture('timeseries-empty.json'), metric });
    if (q.get('range') === 'one') return json(res, 200, oneBucketSeries(metric));
    const file = `timeseries-${metric}.json`;
    if (!existsSync(join(fixtures, 'api', file))) return json(res, 400, { errors: { metric: 'Unknown metric' } });
    return json(res, 200, fixture(file));
  }
  if (route === 'GET /api/v1/agents') {
    if (q.has('drop')) return req.socket.destroy();
    if (q.has('one')) return json(res, 200, { items: [fixture('agents.json').items[0]] });
    return json(res, 200, fixture(q.has('empty') ? 'agents-empty.json' : 'agents.json'));
  }
  let m = url.pathname.match(/^\/api\/v1\/streams\/([\w-]+)\/timeline$/);
  if (req.method === 'GET' && m) {
    if (m[1] === 'cl_stream1') return json(res, 200, fixture('timeline-cl_stream1.json'));
    if (m[1] === 'cl_quiet') return json(res, 200, fixture('timeline-empty.json'));
    if (m[1] === 'cl_one') return json(res, 200, oneBucketTimeline());
    return json(res, 404, { error: 'Not Found' });
  }
  if (route === 'POST /api/v1/streams') {
    await sleep(300); // long enough for the test to see the submit button disabled
    let host = null;
    try {
      host = new URL(body.sourceUrl).hostname;
    } catch {
      return json(res, 400, { errors: { sourceUrl: 'Must be a valid URL' } });
    }
    if (PRIVATE_HOST.test(host)) {
      return json(res, 400, { errors: { sourceUrl: `Hostname resolves to a private address (${host})` } });
    }
    return json(res, 201, streamItem(body, NEW_STREAM_ID));
  }
  m = url.pathname.match(/^\/api\/v1\/streams\/([\w-]+)$/);
  if (m && req.method === 'PATCH') return json(res, 200, streamItem(body, m[1]));
  if (m && req.method === 'DELETE') return json(res, 204);
  if (route === 'POST /api/v1/keys') {
    if (!body.label) return json(res, 400, { errors: { label: 'String must contain at least 1 character(s)' } });
    if (body.label === 'boom') return json(res, 500, { error: 'Internal Server Error' });
    return json(res, 201, { id: 'cl_key9', label: body.label, rawKey: RAW_KEY, createdAt: '2026-11-23T12:00:00.000Z' });
  }
  m = url.pathname.match(/^\/api\/v1\/keys\/([\w-]+)$/);
  if (m && req.method === 'DELETE') return json(res, 204);
  return json(res, 404, { error: 'Not Found' });
}

const ASSETS = {
  '/assets/app.js': ['dist/app.js', 'text/javascript; charset=utf-8'],
  '/assets/app.css': ['dist/app.css', 'text/css; charset=utf-8'],
  '/assets/favicon.svg': ['src/favicon.svg', 'image/svg+xml'],
};

/** Starts on 127.0.0.1 at a free port. */
export async function startFixtureServer() {
  const csp = pageCsp();
  const requests = [];
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    res.setHeader('x-content-type-options', 'nosniff');
    if (ASSETS[url.pathname]) {
      const [file, type] = ASSETS[url.pathname];
      res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' });
      return res.end(readFileSync(join(webRoot, file)));
    }
    const page = PAGES[url.pathname] ?? (/^\/app\/streams\/[\w-]+$/.test(url.pathname) ? 'stream-cl_stream1.html' : null);
    if (page && req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': csp });
      return res.end(readFileSync(join(fixtures, 'pages', page)));
    }
    if (url.pathname.startsWith('/api/')) {
      let raw = '';
      for await (const chunk of req) raw += chunk;
      const body = raw ? JSON.parse(raw) : null;
      requests.push({ method: req.method, path: url.pathname + url.search, body, contentType: req.headers['content-type'] ?? null });
      return api(req, res, url, body ?? {}, sleep);
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    csp,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}
