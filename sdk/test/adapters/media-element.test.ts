import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTelemetry } from '../../src/index';
import { config, countListeners, fakeFetch, fakePage, FakeVideo } from '../helpers';

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
  v.duration = 8;
  v.ranges = [[0, 4]];
  const detach = t.attach(v.asMedia());
  const sent = async () => {
    await t.end();
    return f.events;
  };
  return { f, t, v, detach, sent };
}

describe('media element adapter', () => {
  it('emits playback_start once, on the first playing, with position, duration, contentId and startupMs', async () => {
    const { v, sent } = setup();
    v.fire('play'); // the play intent
    v.paused = false;
    v.fire('loadedmetadata');
    v.fire('waiting'); // initial load: not a rebuffer
    await vi.advanceTimersByTimeAsync(1234);
    v.currentTime = 0.25;
    v.fire('playing'); // the first frame
    v.fire('playing');
    const events = await sent();
    expect(events.map((e) => e.type)).toEqual(['playback_start', 'session_end']);
    expect(events[0].payload).toEqual({ positionMs: 250, durationMs: 8000, contentId: 'movie-42', startupMs: 1234 });
  });

  it('measures startupMs from the first play, even when the viewer paused before the first frame', async () => {
    const { v, sent } = setup();
    v.fire('play');
    await vi.advanceTimersByTimeAsync(300);
    v.pause(); // before playback started: no playback_pause
    await vi.advanceTimersByTimeAsync(2000);
    v.paused = false;
    v.fire('play');
    await vi.advanceTimersByTimeAsync(450);
    v.fire('playing');
    await vi.advanceTimersByTimeAsync(5000);
    v.pause();
    v.play(); // a resume does not touch startupMs
    const events = await sent();
    expect(events.map((e) => e.type)).toEqual(['playback_start', 'playback_pause', 'playback_resume', 'session_end']);
    expect(events[0].payload).toMatchObject({ startupMs: 2750 });
  });

  it('sends startupMs 0 when the first frame comes in the same millisecond as the play', async () => {
    const { v, sent } = setup();
    v.play();
    const [start] = await sent();
    expect(start.payload).toMatchObject({ startupMs: 0 });
  });

  it('leaves startupMs out when the play intent came before attach', async () => {
    const f = fakeFetch();
    const t = createTelemetry(config());
    const v = new FakeVideo();
    v.paused = false;
    v.fire('play'); // not seen: nothing is attached yet
    t.attach(v.asMedia());
    await vi.advanceTimersByTimeAsync(700);
    v.fire('playing');
    await t.end();
    expect(f.events[0]).toEqual({
      type: 'playback_start',
      ts: expect.any(String),
      payload: { positionMs: 0, durationMs: 0, contentId: 'movie-42' },
    });
  });

  it('sends durationMs 0 for a live stream (duration Infinity) and before metadata (NaN)', async () => {
    for (const duration of [Infinity, NaN]) {
      const { v, sent } = setup();
      v.duration = duration;
      v.play();
      const [start] = await sent();
      expect(start.payload).toMatchObject({ durationMs: 0 });
    }
  });

  it('emits pause and resume with position and buffer ahead, but no resume for the first play', async () => {
    const { v, sent } = setup();
    v.play();
    v.currentTime = 1.5;
    v.pause();
    v.play();
    const events = await sent();
    expect(events.map((e) => e.type)).toEqual(['playback_start', 'playback_pause', 'playback_resume', 'session_end']);
    expect(events[1].payload).toEqual({ positionMs: 1500, bufferedMs: 2500 });
    expect(events[2].payload).toEqual({ positionMs: 1500, bufferedMs: 2500 });
  });

  it('ignores a pause before playback started (autoplay refused)', async () => {
    const { v, sent } = setup();
    v.pause();
    v.play();
    expect((await sent()).map((e) => e.type)).toEqual(['playback_start', 'session_end']);
  });

  it('ends the session on ended without a pause event for the end of media', async () => {
    const { v, f } = setup();
    v.play();
    v.end();
    await vi.advanceTimersByTimeAsync(0);
    expect(f.types).toEqual(['playback_start', 'session_end']);
    expect(f.events[1].payload).toMatchObject({ reason: 'ended' });
  });

  it('emits rebuffer_start/end for a stall during playback', async () => {
    const { v, sent } = setup();
    v.play();
    v.currentTime = 3;
    v.ranges = [[0, 3]];
    v.stall();
    v.stall(); // repeated waiting: still one rebuffer
    v.ranges = [[0, 6]];
    v.fire('canplay');
    v.fire('playing');
    const events = await sent();
    expect(events.map((e) => e.type)).toEqual(['playback_start', 'rebuffer_start', 'rebuffer_end', 'session_end']);
    expect(events[1].payload).toEqual({ positionMs: 3000, bufferedMs: 0 });
    expect(events[2].payload).toEqual({ positionMs: 3000, bufferedMs: 3000 });
  });

  it('does not report a seek, or waiting while paused, as a rebuffer', async () => {
    const { v, sent } = setup();
    v.play();
    v.seek(6);
    v.pause();
    v.stall();
    v.seek(2);
    v.play();
    const types = (await sent()).map((e) => e.type);
    expect(types).not.toContain('rebuffer_start');
    expect(types).toEqual(['playback_start', 'playback_pause', 'playback_resume', 'session_end']);
  });

  it('counts waiting after a seek as part of the seek until playback resumes', async () => {
    const { v, sent } = setup();
    v.play();
    v.fire('seeking');
    v.fire('seeked'); // seeked before the data arrives
    v.fire('waiting');
    v.fire('playing');
    v.stall(); // a real stall later
    v.fire('playing');
    expect((await sent()).map((e) => e.type)).toEqual(['playback_start', 'rebuffer_start', 'rebuffer_end', 'session_end']);
  });

  it('closes a stall when the user pauses during it', async () => {
    const { v, sent } = setup();
    v.play();
    v.stall();
    v.pause();
    expect((await sent()).map((e) => e.type)).toEqual([
      'playback_start',
      'rebuffer_start',
      'rebuffer_end',
      'playback_pause',
      'session_end',
    ]);
  });

  it('reports a media error as fatal and ends the session with reason error', async () => {
    const { v, f } = setup();
    v.play();
    v.error = { code: 3, message: 'PIPELINE_ERROR_DECODE' };
    v.fire('error');
    await vi.advanceTimersByTimeAsync(0);
    expect(f.events.slice(1).map((e) => [e.type, e.payload])).toEqual([
      ['error', { code: 'MEDIA_ERR_DECODE', message: 'PIPELINE_ERROR_DECODE', fatal: true }],
      ['session_end', { reason: 'error', durationMs: expect.any(Number) }],
    ]);
  });

  it('detach removes every listener it added', async () => {
    fakeFetch();
    const t = createTelemetry(config());
    const v = new FakeVideo();
    const listeners = countListeners(v);
    const detach = t.attach(v.asMedia());
    expect(listeners.count).toBeGreaterThanOrEqual(7);
    detach();
    expect(listeners.count).toBe(0);
    detach(); // twice is harmless
    v.play();
    await t.end();
  });
});
