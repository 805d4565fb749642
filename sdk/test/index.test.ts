import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTelemetry } from '../src/index';
import { MAX_BUFFERED_EVENTS } from '../src/config';
import { SDK_NAME } from '../src/batch-context';
import { config, fakeFetch, fakePage, FakeVideo, FakeHls } from './helpers';

let page: ReturnType<typeof fakePage>;
beforeEach(() => {
  vi.useFakeTimers();
  page = fakePage();
});
afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

const pause = { type: 'playback_pause', payload: { positionMs: 1, bufferedMs: 2 } } as const;

describe('createTelemetry', () => {
  it('returns a frozen handle with exactly sessionId, emit, attach and end', () => {
    const t = createTelemetry(config());
    expect(Object.keys(t).sort()).toEqual(['attach', 'emit', 'end', 'sessionId']);
    expect(Object.isFrozen(t)).toBe(true);
    expect(t).not.toHaveProperty('on');
    expect(t.sessionId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(createTelemetry(config()).sessionId).not.toBe(t.sessionId);
  });

  it('sends the contract envelope with the bearer key and the same sessionId in every batch', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config({ maxBatchSize: 2 }));
    for (let i = 0; i < 4; i++) t.emit(pause);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.calls).toHaveLength(2);
    for (const c of f.calls) {
      expect(c.url).toBe('https://ingest.example/api/v1/telemetry');
      expect(Object.keys(c.body)).toEqual(['apiKey', 'sessionId', 'events', 'context']);
      expect(c.body.apiKey).toBe('svc_test');
      expect(c.body.sessionId).toBe(t.sessionId);
      expect((c.init.headers as Record<string, string>).authorization).toBe('Bearer svc_test');
      expect(c.init.keepalive).toBe(true);
    }
  });

  it('batches by the default size of 50 and the default interval of 10 s', async () => {
    const f = fakeFetch();
    const t = createTelemetry({ apiKey: 'svc_k', ingestUrl: 'https://h/api/v1/telemetry' });
    for (let i = 0; i < 49; i++) t.emit(pause);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.calls).toHaveLength(0);
    t.emit(pause);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.calls.map((c) => c.body.events.length)).toEqual([50]);
    t.emit(pause);
    await vi.advanceTimersByTimeAsync(9_999);
    expect(f.calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(f.calls.map((c) => c.body.events.length)).toEqual([50, 1]);
  });

  it('stamps ts as YYYY-MM-DDTHH:MM:SS.sssZ, strictly increasing within the session', async () => {
    vi.setSystemTime(new Date('2026-11-21T12:00:00.000Z'));
    const f = fakeFetch();
    const t = createTelemetry(config());
    for (let i = 0; i < 5; i++) t.emit(pause); // same millisecond
    await t.end();
    const ts = f.events.map((e) => e.ts);
    for (const s of ts) expect(s).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    expect(ts[0]).toBe('2026-11-21T12:00:00.000Z');
    expect(ts[5]).toBe('2026-11-21T12:00:00.005Z');
    expect([...ts].sort()).toEqual(ts);
    expect(new Set(ts).size).toBe(ts.length);
  });

  it('end flushes the buffer with session_end last, once', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    t.emit(pause);
    await vi.advanceTimersByTimeAsync(1234);
    await t.end();
    expect(f.calls).toHaveLength(1);
    expect(f.types).toEqual(['playback_pause', 'session_end']);
    expect(f.events[1].payload).toEqual({ reason: 'ended', durationMs: 1234 });
    await t.end('error');
    t.emit(pause);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(f.calls).toHaveLength(1);
  });

  it('end takes unloaded and error as reasons, anything else as ended', async () => {
    for (const [given, sent] of [['unloaded', 'unloaded'], ['error', 'error'], ['bogus', 'ended']]) {
      const f = fakeFetch();
      await createTelemetry(config()).end(given as never);
      expect(f.events[0].payload).toMatchObject({ reason: sent });
    }
  });

  it('on pagehide ends the session as unloaded with a keepalive request and removes its page listeners', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    expect(page.winListeners.types).toEqual(['pagehide']);
    expect(page.docListeners.types).toEqual(['visibilitychange']);
    const v = new FakeVideo();
    t.attach(v.asMedia());
    v.play();
    page.pagehide();
    await vi.advanceTimersByTimeAsync(0);
    expect(f.types).toEqual(['playback_start', 'session_end']);
    expect(f.events[1].payload).toMatchObject({ reason: 'unloaded' });
    expect(f.calls[0].init.keepalive).toBe(true);
    expect(page.winListeners.count).toBe(0);
    expect(page.docListeners.count).toBe(0);
  });

  it('sends the buffer when the page is hidden, without ending the session', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    t.emit(pause);
    page.hide();
    await vi.advanceTimersByTimeAsync(0);
    expect(f.types).toEqual(['playback_pause']);
    t.emit(pause);
    await t.end();
    expect(f.types).toEqual(['playback_pause', 'playback_pause', 'session_end']);
  });

  it('retries a batch after a 500 and after a network error, with backoff', async () => {
    const f = fakeFetch((_c, n) => (n === 1 ? 500 : n === 2 ? new TypeError('offline') : 204));
    const t = createTelemetry(config());
    t.emit(pause);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(f.calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(f.calls).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(f.calls).toHaveLength(3);
    expect(f.calls[2].body).toEqual(f.calls[0].body);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(f.calls).toHaveLength(3);
  });

  it('does not retry 400 or 401 and reports them on the console when debug is on', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    for (const status of [400, 401]) {
      const f = fakeFetch(() => status);
      const t = createTelemetry(config({ debug: true }));
      t.emit(pause);
      await t.end();
      await vi.advanceTimersByTimeAsync(120_000);
      expect(f.calls).toHaveLength(1);
      expect(warn).toHaveBeenCalledWith('[player-sdk]', expect.stringContaining(`answered ${status}`));
    }
  });

  it('is silent without debug', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    fakeFetch(() => 401);
    const t = createTelemetry(config());
    t.emit(pause);
    t.emit({ type: 'nope' } as never);
    await t.end();
    expect(warn).not.toHaveBeenCalled();
  });

  it('holds at most MAX_BUFFERED_EVENTS while the server is down, dropping the oldest', async () => {
    const f = fakeFetch(() => 503);
    const t = createTelemetry(config({ maxBatchSize: 100 }));
    for (let i = 0; i < MAX_BUFFERED_EVENTS + 500; i++) {
      t.emit({ type: 'playback_pause', payload: { positionMs: i, bufferedMs: 0 } });
    }
    await vi.advanceTimersByTimeAsync(0); // every batch failed once and waits for a retry
    expect(f.calls).toHaveLength(15);
    f.calls.length = 0;
    await t.end();
    expect(f.events.length).toBe(MAX_BUFFERED_EVENTS);
    expect(f.events[0].payload).toEqual({ positionMs: 501, bufferedMs: 0 });
    expect(f.events.at(-1)!.type).toBe('session_end');
  });

  it('drops invalid custom events, keeps only contract fields and never sends NaN or Infinity', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    t.emit({ type: 'custom_thing', payload: {} } as never);
    t.emit({ type: 'playback_pause', payload: { positionMs: '1', bufferedMs: 2 } } as never);
    t.emit({ type: 'error', payload: { code: 'x', message: 'm' } } as never);
    t.emit({ type: 'session_end', payload: { reason: 'whatever', durationMs: 1 } } as never);
    t.emit({ type: 'toString', payload: {} } as never);
    t.emit({ type: 'playback_start', payload: { positionMs: NaN, durationMs: Infinity, contentId: 'c', extra: 1 } } as never);
    await t.end();
    expect(f.events.map((e) => [e.type, e.payload])).toEqual([
      ['playback_start', { positionMs: 0, durationMs: 0, contentId: 'c' }],
      ['session_end', { reason: 'ended', durationMs: 0 }],
    ]);
    const raw = JSON.stringify(f.calls.map((c) => c.body));
    expect(raw).not.toMatch(/NaN|Infinity|null/);
  });
});

describe('batch context', () => {
  const contexts = (f: ReturnType<typeof fakeFetch>) => f.calls.map((c) => c.body.context);

  it('is in every batch: sdk, contentId and tags from the start; player and src once attached', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config({ maxBatchSize: 1 }));
    t.emit(pause);
    const v = new FakeVideo();
    t.attach(v.asMedia());
    t.emit(pause);
    v.currentSrc = 'https://cdn.example.com/a/master.m3u8';
    t.emit(pause);
    await t.end();
    const base = { sdk: '@service/player-sdk@0.2.0', contentId: 'movie-42', tags: { env: 'test' } };
    expect(SDK_NAME).toBe(base.sdk);
    expect(contexts(f)).toEqual([
      base,
      { ...base, player: 'native' },
      { ...base, player: 'native', src: 'https://cdn.example.com/a/master.m3u8' },
      { ...base, player: 'native', src: 'https://cdn.example.com/a/master.m3u8' },
    ]);
    // Field order on the wire: sdk, player, contentId, src, tags.
    expect(Object.keys(f.calls[3].body.context!)).toEqual(['sdk', 'player', 'contentId', 'src', 'tags']);
  });

  it('names hls.js with its version and takes src from hls.url, not the element (a blob: URL under MSE)', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    const v = new FakeVideo();
    v.currentSrc = 'blob:https://app.example/1f0c';
    const hls = new FakeHls();
    hls.url = 'https://cdn.example.com/b/master.m3u8';
    t.attach(v.asMedia(), { hls });
    await t.end();
    expect(contexts(f)).toEqual([
      {
        sdk: '@service/player-sdk@0.2.0',
        player: 'hls.js 1.7.4',
        contentId: 'movie-42',
        src: 'https://cdn.example.com/b/master.m3u8',
        tags: { env: 'test' },
      },
    ]);
  });

  it('says hls.js without a version when the instance has none, and leaves out unknown or empty fields', async () => {
    const f = fakeFetch();
    const t = createTelemetry({ apiKey: 'svc_k', ingestUrl: 'https://h/api/v1/telemetry', session: { tags: {} } });
    const hls = { on() {}, off() {}, url: null };
    const v = new FakeVideo();
    v.currentSrc = 'blob:https://app.example/2';
    t.attach(v.asMedia(), { hls });
    t.emit(pause);
    await t.end();
    expect(contexts(f)).toEqual([{ sdk: '@service/player-sdk@0.2.0', player: 'hls.js' }]);
    const g = fakeFetch();
    const t2 = createTelemetry({ apiKey: 'svc_k', ingestUrl: 'https://h/api/v1/telemetry' });
    const native = new FakeVideo();
    native.currentSrc = 'blob:https://app.example/3';
    t2.attach(native.asMedia());
    await t2.end();
    expect(contexts(g)).toEqual([{ sdk: '@service/player-sdk@0.2.0', player: 'native' }]);
  });

  it('keeps every field within the server limits: cut, not refused', async () => {
    const f = fakeFetch();
    const tags: Record<string, unknown> = { ['k'.repeat(70)]: 'long key', empty: '', '': 'no key', n: 3, ok: 'v'.repeat(300) };
    for (let i = 0; i < 30; i++) tags[`t${i}`] = `${i}`;
    const t = createTelemetry({
      apiKey: 'svc_k',
      ingestUrl: 'https://h/api/v1/telemetry',
      session: { contentId: '😀'.repeat(300), tags: tags as Record<string, string> },
    });
    const v = new FakeVideo();
    v.currentSrc = 'https://cdn.example.com/' + 'p'.repeat(3000);
    t.attach(v.asMedia());
    v.play();
    await t.end();
    const ctx = f.calls[0].body.context!;
    expect(ctx.contentId).toBe('😀'.repeat(256));
    expect(ctx.src).toBe(('https://cdn.example.com/' + 'p'.repeat(3000)).slice(0, 2048));
    const sentTags = ctx.tags!;
    expect(Object.keys(sentTags)).toEqual([
      'k'.repeat(64),
      'empty',
      'ok',
      ...Array.from({ length: 17 }, (_, i) => `t${i}`),
    ]);
    expect(sentTags['k'.repeat(64)]).toBe('long key');
    expect(sentTags.empty).toBe('');
    expect(sentTags.ok).toBe('v'.repeat(256));
    // playback_start keeps the longer contentId its payload allows (1024 characters).
    expect(f.events[0].payload).toMatchObject({ contentId: '😀'.repeat(300) });
  });

  it('still sends the batch when reading the source throws', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    const v = new FakeVideo();
    Object.defineProperty(v, 'currentSrc', {
      get() {
        throw new Error('gone');
      },
    });
    t.attach(v.asMedia());
    t.emit(pause);
    await t.end();
    expect(f.types).toEqual(['playback_pause', 'session_end']);
    expect(contexts(f)).toEqual([{ sdk: '@service/player-sdk@0.2.0', player: 'native', contentId: 'movie-42', tags: { env: 'test' } }]);
  });
});

describe('never throws into the host page', () => {
  it('returns a do-nothing handle for an unusable config', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const f = fakeFetch();
    for (const bad of [undefined, null, {}, { apiKey: '', ingestUrl: 'u' }, { apiKey: 'k' }]) {
      const t = createTelemetry(bad as never);
      expect(typeof t.sessionId).toBe('string');
      t.emit(pause);
      t.attach(new FakeVideo().asMedia())();
      await t.end();
    }
    expect(f.calls).toHaveLength(0);
    expect(warn).toHaveBeenCalled();
  });

  it('survives a fetch that throws synchronously, a missing fetch, and a throwing console', async () => {
    vi.spyOn(console, 'warn').mockImplementation(() => {
      throw new Error('console broken');
    });
    vi.stubGlobal('fetch', () => {
      throw new Error('sync boom');
    });
    const t = createTelemetry(config({ debug: true, maxBatchSize: 1 }));
    expect(() => t.emit(pause)).not.toThrow();
    vi.stubGlobal('fetch', undefined);
    expect(() => t.emit(pause)).not.toThrow();
    await expect(t.end()).resolves.toBeUndefined();
    await vi.advanceTimersByTimeAsync(10 * 60_000);
  });

  it('survives bad arguments and a media element whose properties throw', async () => {
    fakeFetch();
    const t = createTelemetry(config());
    expect(() => t.emit(null as never)).not.toThrow();
    expect(() => t.emit(undefined as never)).not.toThrow();
    expect(typeof t.attach(null as never)).toBe('function');
    expect(typeof t.attach({} as never)).toBe('function');
    const v = new FakeVideo();
    Object.defineProperty(v, 'currentTime', {
      get() {
        throw new Error('detached');
      },
    });
    t.attach(v.asMedia(), { hls: new FakeHls() });
    const hlsBroken = { on() { throw new Error('no'); }, off() { throw new Error('no'); } };
    expect(typeof t.attach(new FakeVideo().asMedia(), { hls: hlsBroken })).toBe('function');
    expect(() => v.play()).not.toThrow();
    expect(() => v.pause()).not.toThrow();
    await expect(t.end(42 as never)).resolves.toBeUndefined();
  });
});
