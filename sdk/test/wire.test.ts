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
/** Length in characters (code points), as the server counts. */
const chars = (s: string) => Array.from(s).length;
/** Limits of `context` strings (analytics.md §1). */
const CONTEXT_STRINGS: Array<[string, number]> = [['sdk', 64], ['player', 64], ['contentId', 256], ['src', 2048]];

/** `{ type: { key: JSON type } }`, the union over the events of `batch`. */
type Shapes = Record<string, Record<string, string>>;
function shapesOf(batch: TelemetryBatch): Shapes {
  const out: Shapes = {};
  for (const e of batch.events) out[e.type] = { ...out[e.type], ...shape(e.payload) };
  return out;
}

/** Why `ctx` is refused as a batch context (analytics.md §1, docs/decisions.md), or []. */
function contextRefusals(ctx: unknown): string[] {
  if (jsonType(ctx) !== 'object') return ['context not an object'];
  const c = ctx as Record<string, unknown>;
  const why: string[] = [];
  for (const [k, max] of CONTEXT_STRINGS) {
    if (!(k in c)) continue;
    if (typeof c[k] !== 'string') why.push(`context.${k} not a string`);
    else if (chars(c[k] as string) > max) why.push(`context.${k} over ${max}`);
  }
  if ('tags' in c) {
    if (jsonType(c.tags) !== 'object') return [...why, 'context.tags not an object'];
    const tags = Object.entries(c.tags as object);
    if (tags.length > 20) why.push('context.tags over 20');
    for (const [k, v] of tags) {
      if (chars(k) < 1 || chars(k) > 64) why.push('context.tags key not 1..64');
      if (typeof v !== 'string' || chars(v) > 256) why.push(`context.tags.${k}`);
    }
  }
  return why;
}

/**
 * The server's acceptance rules (decisions.md §7, analytics.md §1) restated for the test;
 * returns why a body is refused, or [] when it is accepted. `required` holds every type's
 * required payload fields, `optional` its optional ones (numbers at least 0). Proven against
 * every golden fixture below, so the SDK's batches are checked against rules that match the
 * server's.
 */
function refusals(body: unknown, required: Shapes, optional: Shapes): string[] {
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
    for (const [k, t] of Object.entries(required[ev.type])) {
      if (jsonType(p[k]) !== t) why.push(`events.${i}.payload.${k} not ${t}`);
      if (t === 'number' && !Number.isFinite(p[k])) why.push(`events.${i}.payload.${k} not finite`);
    }
    for (const k of Object.keys(optional[ev.type] || {})) {
      if (k in p && !(typeof p[k] === 'number' && (p[k] as number) >= 0)) why.push(`events.${i}.payload.${k} not a number >= 0`);
    }
    if (ev.type === 'session_end' && !['ended', 'unloaded', 'error'].includes(p.reason as string)) {
      why.push(`events.${i}.payload.reason`);
    }
  });
  if ('context' in b) why.push(...contextRefusals(b.context));
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
  hls.url = 'https://cdn.example.com/movie-42/master.m3u8';
  v.currentSrc = 'blob:https://app.example/5c1e';
  v.duration = 8;
  v.ranges = [[0, 3.5]];
  t1.attach(v.asMedia(), { hls });
  v.fire('play');
  hls.switchTo(0);
  await vi.advanceTimersByTimeAsync(412);
  v.paused = false;
  v.fire('playing');
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
  // session 2: live stream without hls.js, ended by a fatal media error
  const t2 = createTelemetry(config());
  const live = new FakeVideo();
  live.currentSrc = 'https://cdn.example.com/live/index.m3u8';
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
  // session 5: every context field over its limit, and tags the server would refuse
  const tags: Record<string, unknown> = { '': 'empty key', ['😀'.repeat(65)]: 'long key', n: 1, long: 'é'.repeat(257) };
  for (let i = 0; i < 25; i++) tags[`t${i}`] = `${i}`;
  const t5 = createTelemetry({ ...config(), session: { contentId: 'c'.repeat(300), tags: tags as Record<string, string> } });
  const big = new FakeVideo();
  const longHls = new (class extends FakeHls {
    static version = 'x'.repeat(80);
  })();
  longHls.url = 'https://cdn.example.com/' + '😀'.repeat(2100);
  t5.attach(big.asMedia(), { hls: longHls });
  big.play();
  await t5.end();
  await vi.advanceTimersByTimeAsync(0);
  vi.useRealTimers();
  vi.unstubAllGlobals();
  return f.calls;
}

describe('wire format against ingest/fixtures', () => {
  const valid = join(fixtures, 'valid');
  const invalid = join(fixtures, 'invalid');
  /** The 0.1.0 wire: one event of each type with every required field, no context. */
  let golden: TelemetryBatch;
  /** What SDK 0.2.0 sends: every type, the optional fields and a full context. */
  let golden02: TelemetryBatch;
  let required: Shapes;
  let optional: Shapes;
  let calls: Call[];

  beforeAll(async () => {
    golden = readJson(join(valid, 'all-event-types.json'));
    golden02 = readJson(join(valid, 'sdk-0.2.0-full.json'));
    required = shapesOf(golden);
    const full = shapesOf(golden02);
    optional = Object.fromEntries(
      Object.entries(full).map(([t, keys]) => [t, Object.fromEntries(Object.entries(keys).filter(([k]) => !(k in required[t])))]),
    );
    calls = await everythingTheSdkSends();
  });
  afterAll(() => vi.useRealTimers());

  it('the golden all-event-types.json and sdk-0.2.0-full.json have every type; 0.2.0 adds only the optional fields', () => {
    expect(golden.events.map((e) => e.type).sort()).toEqual([...TYPES].sort());
    expect([...new Set(golden02.events.map((e) => e.type))].sort()).toEqual([...TYPES].sort());
    for (const t of TYPES) expect(shapesOf(golden02)[t], t).toMatchObject(required[t]);
    expect(optional).toMatchObject({
      playback_start: { startupMs: 'number' },
      quality_change: { width: 'number', height: 'number' },
    });
    expect(Object.values(optional).flatMap((o) => Object.keys(o)).sort()).toEqual(['height', 'startupMs', 'width']);
  });

  it('the SDK produces every type, each with the required payload keys and JSON types, and only known optional ones', () => {
    const seen = new Set<string>();
    for (const { body } of calls) {
      for (const e of body.events) {
        seen.add(e.type);
        expect(Object.keys(e).sort(), `${e.type} event keys`).toEqual(Object.keys(golden.events[0]).sort());
        const { [e.type]: allowed } = optional;
        const extra = Object.fromEntries(Object.entries(shape(e.payload)).filter(([k]) => !(k in required[e.type])));
        expect(shape(e.payload), `${e.type} payload`).toEqual({ ...required[e.type], ...extra });
        for (const [k, t] of Object.entries(extra)) expect(allowed && allowed[k], `${e.type}.${k}`).toBe(t);
        expect(e.ts).toMatch(TS);
      }
    }
    expect([...seen].sort()).toEqual([...TYPES].sort());
    const reasons = calls.flatMap((c) => c.body.events.filter((e) => e.type === 'session_end').map((e) => e.payload));
    expect(reasons.map((p) => (p as { reason: string }).reason).sort()).toEqual(['ended', 'ended', 'ended', 'error', 'unloaded']);
  });

  it('the SDK sends the 0.2.0 fields: startupMs, an initial quality_change with from "" and sizes, switches with sizes', () => {
    const events = calls.flatMap((c) => c.body.events);
    const starts = events.filter((e) => e.type === 'playback_start').map((e) => e.payload);
    expect(starts).toContainEqual({ positionMs: 0, durationMs: 8000, contentId: 'movie-42', startupMs: 412 });
    const switches = events.filter((e) => e.type === 'quality_change').map((e) => e.payload);
    expect(switches).toContainEqual({ from: '', to: '360p', bitrate: 400_000, width: 640, height: 360 });
    expect(switches).toContainEqual({ from: '360p', to: '720p', bitrate: 1_500_000, width: 1280, height: 720 });
  });

  it('the SDK envelope has the 0.2.0 golden keys and types, with a context in every batch; the bearer equals the body apiKey', () => {
    const contextShape = shape(golden02.context!);
    for (const { body, init } of calls) {
      expect(shape(body as never)).toEqual(shape(golden02 as never));
      expect(body.context!.sdk).toBe(golden02.context!.sdk);
      for (const [k, t] of Object.entries(shape(body.context!))) expect(contextShape[k], `context.${k}`).toBe(t);
      expect((init.headers as Record<string, string>).authorization).toBe(`Bearer ${body.apiKey}`);
    }
    // Once a player is attached, every field the golden context has is known.
    expect(calls.map((c) => Object.keys(c.body.context!).sort())).toContainEqual(Object.keys(contextShape).sort());
  });

  it('the acceptance rules used here accept every valid fixture', () => {
    const files = readdirSync(valid).filter((f) => f.endsWith('.json'));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) expect(refusals(readJson(join(valid, f)), required, optional), f).toEqual([]);
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
      expect(refusals(body, required, optional), f).not.toEqual([]);
    }
  });

  it('no batch the SDK sends would be refused', () => {
    expect(calls.length).toBeGreaterThan(0);
    for (const { body } of calls) expect(refusals(body, required, optional)).toEqual([]);
    const raw = calls.map((c) => String(c.init.body)).join('\n');
    expect(raw).not.toMatch(/NaN|Infinity|null|undefined/);
  });
});
