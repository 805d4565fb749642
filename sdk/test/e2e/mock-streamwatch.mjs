//! A stand-in for the streamwatch routes the E2E test uses, for working on the SDK without the server
//! (`E2E_MOCK_SERVER=1 npm run test:e2e`). The real E2E run starts the real binary.

import { createReadStream, existsSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';

export function startMock({ sdkDist, webDir }) {
  const keys = new Set();
  const rows = new Map(); // `${sessionId} ${ts} ${type}` -> event
  const json = (res, status, body) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(body === undefined ? '' : JSON.stringify(body));
  const readBody = (req) =>
    new Promise((resolve) => {
      let s = '';
      req.on('data', (c) => (s += c)).on('end', () => resolve(s));
    });
  const server = createServer(async (req, res) => {
    const { pathname } = new URL(req.url, 'http://x');
    const cookie = /auth\.session_token=mock/.test(req.headers.cookie || '');
    if (pathname === '/healthz') return json(res, 200, { ok: true });
    if (req.method === 'POST' && pathname === '/api/auth/sign-up/email') {
      res.setHeader('set-cookie', 'auth.session_token=mock.sig; HttpOnly; SameSite=Lax; Path=/');
      return json(res, 200, { token: 'mock', user: { id: 'u1', email: 'e', name: 'n' } });
    }
    if (req.method === 'POST' && pathname === '/api/v1/keys') {
      if (!cookie) return json(res, 401, { error: 'Unauthorized' });
      const rawKey = `svc_${Math.random().toString(36).slice(2)}`;
      keys.add(rawKey);
      return json(res, 201, { id: 'k1', label: 'e2e', rawKey, createdAt: new Date().toISOString() });
    }
    if (req.method === 'POST' && pathname === '/api/v1/telemetry') {
      const bearer = (req.headers.authorization || '').replace(/^Bearer /, '');
      if (!keys.has(bearer)) return json(res, 401, { error: 'Invalid API key' });
      let body;
      try {
        body = JSON.parse(await readBody(req));
      } catch {
        return json(res, 400, { errors: { events: 'Invalid JSON' } });
      }
      if (body.apiKey !== bearer) return json(res, 401, { error: 'Invalid API key' });
      for (const e of body.events) rows.set(`${body.sessionId} ${e.ts} ${e.type}`, { ...e, sessionId: body.sessionId });
      return json(res, 204);
    }
    const m = pathname.match(/^\/api\/v1\/telemetry\/sessions\/([^/]+)\/events$/);
    if (req.method === 'GET' && m) {
      if (!cookie) return json(res, 401, { error: 'Unauthorized' });
      const items = [...rows.values()]
        .filter((e) => e.sessionId === decodeURIComponent(m[1]))
        .map(({ type, ts, payload }) => ({ type, ts, payload }))
        .sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : 0));
      return json(res, 200, { items });
    }
    if (pathname === '/sdk/@service/player-sdk@0.1.0/dist/index.js') {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      return createReadStream(sdkDist).pipe(res);
    }
    const file = normalize(join(webDir, pathname));
    if (file.startsWith(webDir) && existsSync(file) && statSync(file).isFile()) {
      res.writeHead(200, { 'content-type': extname(file) === '.html' ? 'text/html; charset=utf-8' : 'application/octet-stream' });
      return createReadStream(file).pipe(res);
    }
    json(res, 404, { error: 'Not Found' });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) }),
    ),
  );
}
