import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTelemetry } from '../../src/index';
import { levelLabel } from '../../src/adapters/hlsjs';
import { config, countListeners, fakeFetch, fakePage, FakeHls, FakeVideo } from '../helpers';

beforeEach(() => {
  vi.useFakeTimers();
  fakePage();
});
afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

function setup() {
  const f = fakeFetch();
  const t = createTelemetry(config());
  const v = new FakeVideo();
  const hls = new FakeHls();
  const detach = t.attach(v.asMedia(), { hls });
  return { f, t, v, hls, detach };
}

describe('levelLabel', () => {
  it('prefers the height, then the NAME, then the bitrate', () => {
    expect(levelLabel({ height: 720, name: 'hd', bitrate: 1 }, 0)).toBe('720p');
    expect(levelLabel({ height: 0, name: 'audio-only', bitrate: 64_000 }, 0)).toBe('audio-only');
    expect(levelLabel({ bitrate: 1_500_000 }, 0)).toBe('1500k');
    expect(levelLabel(undefined, 3)).toBe('level 3');
  });
});

describe('hls.js adapter', () => {
  it('reports the first level as the initial rendition (from "") and later switches, with dimensions', async () => {
    const { t, hls, f } = setup();
    hls.switchTo(0);
    hls.switchTo(1);
    hls.switchTo(1);
    hls.switchTo(0);
    await t.end();
    expect(f.events.filter((e) => e.type === 'quality_change').map((e) => e.payload)).toEqual([
      { from: '', to: '360p', bitrate: 400_000, width: 640, height: 360 },
      { from: '360p', to: '720p', bitrate: 1_500_000, width: 1280, height: 720 },
      { from: '720p', to: '360p', bitrate: 400_000, width: 640, height: 360 },
    ]);
  });

  it('reports the level already playing at attach time as the initial rendition, at once', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    const hls = new FakeHls();
    hls.currentLevel = 1;
    t.attach(new FakeVideo().asMedia(), { hls });
    hls.switchTo(1); // the same level: no event
    hls.switchTo(0);
    await t.end();
    expect(f.events.filter((e) => e.type === 'quality_change').map((e) => e.payload)).toEqual([
      { from: '', to: '720p', bitrate: 1_500_000, width: 1280, height: 720 },
      { from: '720p', to: '360p', bitrate: 400_000, width: 640, height: 360 },
    ]);
  });

  it('leaves width and height out unless both are known', async () => {
    const { t, hls, f } = setup();
    hls.levels = [
      { width: 0, height: 0, bitrate: 64_000, name: 'audio' },
      { width: 1920, height: 0, bitrate: 5_000_000, name: 'hd' },
      { width: 1920, height: 1080, bitrate: 6_000_000, name: '' },
    ];
    hls.switchTo(0);
    hls.switchTo(1);
    hls.switchTo(2);
    hls.trigger('hlsLevelSwitched', { level: 7 }); // not in levels
    hls.trigger('hlsLevelSwitched', { level: -1 }); // not a level
    await t.end();
    expect(f.events.filter((e) => e.type === 'quality_change').map((e) => e.payload)).toEqual([
      { from: '', to: 'audio', bitrate: 64_000 },
      { from: 'audio', to: 'hd', bitrate: 5_000_000 },
      { from: 'hd', to: '1080p', bitrate: 6_000_000, width: 1920, height: 1080 },
      { from: '1080p', to: 'level 7', bitrate: 0 },
    ]);
  });

  it('reports hls.js errors with details as code and the fatal flag; fatal ends the session', async () => {
    const { hls, f } = setup();
    hls.trigger('hlsError', { type: 'networkError', details: 'fragLoadError', fatal: false, error: new Error('HTTP 404') });
    hls.trigger('hlsError', { type: 'networkError', details: 'fragLoadError', fatal: false }); // repeat within 5 s
    hls.trigger('hlsError', { type: 'mediaError', details: 'bufferAppendError', fatal: true, reason: 'append failed' });
    await vi.advanceTimersByTimeAsync(0);
    expect(f.events.map((e) => [e.type, e.payload])).toEqual([
      ['error', { code: 'fragLoadError', message: 'HTTP 404', fatal: false }],
      ['error', { code: 'bufferAppendError', message: 'append failed', fatal: true }],
      ['session_end', { reason: 'error', durationMs: expect.any(Number) }],
    ]);
  });

  it('reports a media element error as non-fatal while hls.js is attached', async () => {
    const { t, v, f } = setup();
    v.error = { code: 2, message: '' };
    v.fire('error');
    await t.end();
    expect(f.events[0].payload).toEqual({ code: 'MEDIA_ERR_NETWORK', message: 'MEDIA_ERR_NETWORK', fatal: false });
    expect(f.events[1].payload).toMatchObject({ reason: 'ended' });
  });

  it('detach removes the hls.js and media element listeners', () => {
    fakeFetch();
    const t = createTelemetry(config());
    const v = new FakeVideo();
    const listeners = countListeners(v);
    const hls = new FakeHls();
    const detach = t.attach(v.asMedia(), { hls });
    expect(hls.listenerCount).toBe(2);
    detach();
    expect(hls.listenerCount).toBe(0);
    expect(listeners.count).toBe(0);
  });

  it('end detaches everything that was attached', async () => {
    const { t, hls, v } = setup();
    const listeners = countListeners(v); // counts only what is added from now on
    t.attach(v.asMedia());
    await t.end();
    expect(hls.listenerCount).toBe(0);
    expect(listeners.count).toBe(0);
  });
});
