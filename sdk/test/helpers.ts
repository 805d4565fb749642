//! Test plumbing: a fake <video>, a fake hls.js, a fake fetch, and a fake window/document.

import { vi } from 'vitest';
import type { TelemetryBatch } from '../src/events';

/** Wraps add/removeEventListener of `target` to count the listeners it holds. */
export function countListeners<T extends { addEventListener: any; removeEventListener: any }>(target: T) {
  const live: Array<[string, unknown]> = [];
  const add = target.addEventListener.bind(target);
  const remove = target.removeEventListener.bind(target);
  target.addEventListener = (type: string, fn: any, o?: any) => {
    if (!live.some(([t, f]) => t === type && f === fn)) live.push([type, fn]);
    return add(type, fn, o);
  };
  target.removeEventListener = (type: string, fn: any, o?: any) => {
    const i = live.findIndex(([t, f]) => t === type && f === fn);
    if (i >= 0) live.splice(i, 1);
    return remove(type, fn, o);
  };
  return {
    get count() {
      return live.length;
    },
    get types() {
      return live.map(([t]) => t).sort();
    },
  };
}

/** The parts of HTMLMediaElement the adapter reads, with helpers that fire events like a browser. */
export class FakeVideo extends EventTarget {
  currentSrc = '';
  currentTime = 0;
  duration = NaN;
  paused = true;
  ended = false;
  seeking = false;
  error: { code: number; message: string } | null = null;
  ranges: Array<[number, number]> = [];
  get buffered() {
    const r = this.ranges;
    return { length: r.length, start: (i: number) => r[i][0], end: (i: number) => r[i][1] };
  }
  fire(type: string) {
    this.dispatchEvent(new Event(type));
  }
  /** play() from paused, through to `playing`. */
  play() {
    this.paused = false;
    this.fire('play');
    this.fire('playing');
  }
  pause() {
    this.paused = true;
    this.fire('pause');
  }
  seek(t: number) {
    this.seeking = true;
    this.currentTime = t;
    this.fire('seeking');
    this.fire('waiting');
    this.seeking = false;
    this.fire('seeked');
    this.fire('canplay');
    if (!this.paused) this.fire('playing');
  }
  stall() {
    this.fire('waiting');
  }
  end() {
    this.currentTime = this.duration;
    this.ended = true;
    this.paused = true;
    this.fire('pause');
    this.fire('ended');
  }
  asMedia(): HTMLMediaElement {
    return this as unknown as HTMLMediaElement;
  }
}

type Listener = (event: string, data: unknown) => void;

/** hls.js stand-in: on/off/trigger, levels, currentLevel, url, and the static Events names and version. */
export class FakeHls {
  static Events = { LEVEL_SWITCHED: 'hlsLevelSwitched', ERROR: 'hlsError' };
  static version = '1.7.4';
  levels = [
    { width: 640, height: 360, bitrate: 400_000, name: '' },
    { width: 1280, height: 720, bitrate: 1_500_000, name: '' },
  ];
  currentLevel = -1;
  url: string | null = null;
  listeners = new Map<string, Set<Listener>>();
  on(event: string, fn: Listener) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    this.listeners.get(event)!.add(fn);
  }
  off(event: string, fn: Listener) {
    this.listeners.get(event)?.delete(fn);
  }
  get listenerCount() {
    let n = 0;
    for (const s of this.listeners.values()) n += s.size;
    return n;
  }
  trigger(event: string, data: unknown) {
    for (const fn of [...(this.listeners.get(event) ?? [])]) fn(event, data);
  }
  switchTo(level: number) {
    this.currentLevel = level;
    this.trigger(FakeHls.Events.LEVEL_SWITCHED, { level });
  }
}

export interface Call {
  url: string;
  init: RequestInit;
  body: TelemetryBatch;
}

/**
 * Replaces globalThis.fetch. `respond` decides each answer: a status number, or an Error
 * to reject with (a network error). Default 204.
 */
export function fakeFetch(respond: (call: Call, n: number) => number | Error = () => 204) {
  const calls: Call[] = [];
  const fn = vi.fn(async (url: string, init: RequestInit) => {
    const call = { url, init, body: JSON.parse(String(init.body)) as TelemetryBatch };
    calls.push(call);
    const r = respond(call, calls.length);
    if (r instanceof Error) throw r;
    return { status: r, ok: r >= 200 && r < 300 } as Response;
  });
  vi.stubGlobal('fetch', fn);
  return {
    fn,
    calls,
    /** Every event sent, in order of sending. */
    get events() {
      return calls.flatMap((c) => c.body.events);
    },
    get types() {
      return calls.flatMap((c) => c.body.events.map((e) => e.type));
    },
  };
}

/** Installs a fake `window` and `document` with listener counting. */
export function fakePage() {
  const win = new EventTarget();
  const doc = Object.assign(new EventTarget(), { visibilityState: 'visible' as DocumentVisibilityState });
  const winListeners = countListeners(win);
  const docListeners = countListeners(doc);
  vi.stubGlobal('window', win);
  vi.stubGlobal('document', doc);
  return {
    win,
    doc,
    winListeners,
    docListeners,
    pagehide() {
      win.dispatchEvent(new Event('pagehide'));
    },
    hide() {
      doc.visibilityState = 'hidden';
      doc.dispatchEvent(new Event('visibilitychange'));
    },
  };
}

export const config = (options: Record<string, unknown> = {}) => ({
  apiKey: 'svc_test',
  ingestUrl: 'https://ingest.example/api/v1/telemetry',
  session: { contentId: 'movie-42', tags: { env: 'test' } },
  options: { flushIntervalMs: 10_000, maxBatchSize: 50, ...options },
});
