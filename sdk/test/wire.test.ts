//! The SDK's batches against the golden wire payloads in ingest/fixtures/, which the server's tests load too.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTelemetry } from '../src/index';
import type { TelemetryBatch } from '../src/events';
import { config, fakeFetch, fakePage, FakeHls, FakeVideo, type Call } from './helpers';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '../../ingest/fixtures');
const TYPES = [
  'playback_start',
  'playback_pause',
  'playback_resume',
  'rebuffer_start',
  'rebuffer_end',
  'quality_change',
  'error',
  'session_end',
];
const TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const jsonType = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
/** `{ key: JSON type }` of an object, keys sorted. */
const shape = (o: object) =>
  Object.fromEntries(Object.keys(o).sort().map((k) => [k, jsonType((o as Record<string, unknown>)[k])]));

/**
 * The server's acceptance rules (decisions.md §7) restated for the test; returns why a
 * body is refused, or [] when it is accepted. Proven against every golden fixture below,
 * so the SDK's batches are checked against rules that match the server's.
 */
function refusals(body: unknown, shapes: Record<string, Record<string, string>>): string[] {
  const why: string[] = [];
  if (!body || jsonType(body) !== 'object') return ['body is not an object'];
  const b = body as Record<string, unknown>;
  for (const k of ['apiKey', 'sessionId']) {
    if (typeof b[k] !== 'string' || !(b[k] as string).length) why.push(`${k} not a non-empty string`);
  }
  if (!Array.isArray(b.events)) return [...why, 'events not an array'];
  if (b.events.length < 1 || b.events.length > 1000) why.push('events not 1..1000');
  b.events.forEach((e: unknown, i) => {
    if (jsonType(e) !== 'object') return why.push(`events.${i} not an object`);
    const ev = e as Record<string, unknown>;
    if (typeof ev.type !== 'string' || !TYPES.includes(ev.type)) return why.push(`events.${i}.type unknown`);
    if (!serverAcceptsTs(ev.ts)) why.push(`events.${i}.ts`);
    if (jsonType(ev.payload) !== 'object') return why.push(`events.${i}.payload not an object`);
    const p = ev.payload as Record<string, unknown>;
    for (const [k, t] of Object.entries(shapes[ev.type])) {
      if (jsonType(p[k]) !== t) why.push(`events.${i}.payload.${k} not ${t}`);
      if (t === 'number' && !Number.isFinite(p[k])) why.push(`events.${i}.payload.${k} not finite`);
    }
    if (ev.type === 'session_end' && !['ended', 'unloaded', 'error'].includes(p.reason as string)) {
      why.push(`events.${i}.payload.reason`);
    }
  });
  return why;
}

/** The server's ts grammar (ingest/src/time.rs): date and time, optional fraction, `Z` or an offset; calendar checked. */
function serverAcceptsTs(ts: unknown): boolean {
  const m = typeof ts === 'string' && ts.match(/^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):?(\d{2}))$/);
  if (!m) return false;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number);
  const days = new Date(Date.UTC(y, mo, 0)).getUTCDate();
  if (mo < 1 || mo > 12 || d < 1 || d > days || h > 23 || mi > 59 || s > 59) return false;
  if (m[9] && (Number(m[9]) > 23 || Number(m[10]) > 59)) return false;
  return true;
}

const readJson = (p: string) => JSON.parse(readFileSync(p, 'utf8'));

/** Drives the SDK through every event type (and every session_end reason); returns every request. */
async function everythingTheSdkSends(): Promise<Call[]> {
  vi.useFakeTimers();
  const page = fakePage();
  const f = fakeFetch();
  // session 1: a whole playback with hls.js, ended by the media
  const t1 = createTelemetry(config({ maxBatchSize: 3 }));
  const v = new FakeVideo();
  const hls = new FakeHls();
  v.duration = 8;
  v.ranges = [[0, 3.5]];
  t1.attach(v.asMedia(), { hls });
  hls.switchTo(0);
  v.play();
  v.currentTime = 1.234;
  v.pause();
  v.play();
  v.stall();
  v.fire('playing');
  hls.switchTo(1);
  hls.trigger('hlsError', { type: 'networkError', details: 'fragLoadError', fatal: false, error: new Error('HTTP 404') });
  v.error = { code: 3, message: '' };
  v.fire('error');
  v.end();
  // session 2: live stream, ended by a fatal media error
  const t2 = createTelemetry(config());
  const live = new FakeVideo();
  live.duration = Infinity;
  t2.attach(live.asMedia());
  live.play();
  live.error = { code: 4, message: 'unsupported' };
  live.fire('error');
  // session 3: custom events, then the page goes away
  const t3 = createTelemetry(config());
  t3.emit({ type: 'quality_change', payload: { from: 'a', to: 'b', bitrate: 1.5 } });
  t3.emit({ type: 'error', payload: { code: 'APP', message: 'custom', fatal: false } });
  page.pagehide();
  // session 4: explicit end
  await createTelemetry(config()).end();
  await vi.advanceTimersByTimeAsync(0);
  vi.useRealTimers();
  vi.unstubAllGlobals();
  return f.calls;
}

describe('wire format against ingest/fixtures', () => {
  const valid = join(fixtures, 'valid');
  const invalid = join(fixtures, 'invalid');
  let golden: TelemetryBatch;
  let shapes: Record<string, Record<string, string>>;
  let calls: Call[];

  beforeAll(async () => {
    golden = readJson(join(valid, 'all-event-types.json'));
    shapes = Object.fromEntries(golden.events.map((e) => [e.type, shape(e.payload)]));
    calls = await everythingTheSdkSends();
  });
  afterAll(() => vi.useRealTimers());

  it('the golden all-event-types.json has one event of each of the eight types', () => {
    expect(golden.events.map((e) => e.type).sort()).toEqual([...TYPES].sort());
  });

  it('the SDK produces every type, each with exactly the golden payload keys and JSON types', () => {
    const seen = new Set<string>();
    for (const { body } of calls) {
      for (const e of body.events) {
        seen.add(e.type);
        expect(Object.keys(e).sort(), `${e.type} event keys`).toEqual(Object.keys(golden.events[0]).sort());
        expect(shape(e.payload), `${e.type} payload`).toEqual(shapes[e.type]);
        expect(e.ts).toMatch(TS);
      }
    }
    expect([...seen].sort()).toEqual([...TYPES].sort());
    const reasons = calls.flatMap((c) => c.body.events.filter((e) => e.type === 'session_end').map((e) => e.payload));
    expect(reasons.map((p) => (p as { reason: string }).reason).sort()).toEqual(['ended', 'ended', 'error', 'unloaded']);
  });

  it('the SDK envelope has the golden keys and types, and the bearer equals the body apiKey', () => {
    for (const { body, init } of calls) {
      expect(shape(body as never)).toEqual(shape(golden as never));
      expect((init.headers as Record<string, string>).authorization).toBe(`Bearer ${body.apiKey}`);
    }
  });

  it('the acceptance rules used here accept every valid fixture', () => {
    const files = readdirSync(valid).filter((f) => f.endsWith('.json'));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) expect(refusals(readJson(join(valid, f)), shapes), f).toEqual([]);
  });

  it('the acceptance rules used here refuse every invalid fixture answered with 400', () => {
    const files = existsSync(invalid) ? readdirSync(invalid).filter((f) => f.endsWith('.json')) : [];
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const fx = readJson(join(invalid, f));
      if (fx.expected?.status !== 400) continue; // not a body rule (the bearer check is tested above)
      let body = fx.body;
      if (fx.raw === true) {
        // `body` is the request text as sent: the SDK only ever sends JSON.stringify output
        try {
          body = JSON.parse(fx.body);
        } catch {
          continue;
        }
      }
      expect(refusals(body, shapes), f).not.toEqual([]);
    }
  });

  it('no batch the SDK sends would be refused', () => {
    expect(calls.length).toBeGreaterThan(0);
    for (const { body } of calls) expect(refusals(body, shapes)).toEqual([]);
    const raw = calls.map((c) => String(c.init.body)).join('\n');
    expect(raw).not.toMatch(/NaN|Infinity|null|undefined/);
  });
});
