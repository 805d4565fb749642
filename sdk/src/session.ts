//! Session identity, clock and the console logger shared by one telemetry instance.

/**
 * A time-ordered UUID (version 7, RFC 9562): 48 bits of Unix time in ms, then random bits
 * (from `crypto.getRandomValues`, or `Math.random` without crypto). Sessions that start
 * close in time sort close together, so the server's per-session rows of recent sessions
 * sit together in its stores' sort order instead of scattered over every session ever.
 */
export function newSessionId(now: () => number = Date.now): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  const b = new Uint8Array(16);
  if (c && typeof c.getRandomValues === 'function') c.getRandomValues(b);
  else for (let i = 0; i < 16; i++) b[i] = (Math.random() * 256) | 0;
  let ms = Math.max(0, Math.floor(now()));
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => (x + 256).toString(16).slice(1)).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * Hands out event timestamps in ms that strictly increase within the session. The
 * server keys rows by (sessionId, ts, type), so two events in the same millisecond
 * must not share a ts, or the second would be taken for a retry and dropped.
 */
export function monotonicClock(now: () => number = Date.now): () => number {
  let last = 0;
  return () => (last = Math.max(now(), last + 1));
}

export type Log = (...args: unknown[]) => void;

/** `console.warn` prefixed with the package name when debug is on, else a no-op. */
export function makeLog(debug: boolean): Log {
  return (...args) => {
    if (!debug) return;
    try {
      console.warn('[player-sdk]', ...args);
    } catch {
      // a broken console must not break the page
    }
  };
}

/** Wraps `fn` so that it never throws; a fault is logged instead. */
export function guard<A extends unknown[], R>(log: Log, fn: (...args: A) => R): (...args: A) => R | undefined {
  return (...args: A) => {
    try {
      return fn(...args);
    } catch (e) {
      log('internal error', e);
      return undefined;
    }
  };
}
