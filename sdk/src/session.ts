//! Session identity, clock and the console logger shared by one telemetry instance.

/** A random v4 UUID: `crypto.randomUUID` where present, else built from random bytes. */
export function newSessionId(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  const b = new Uint8Array(16);
  if (c && typeof c.getRandomValues === 'function') c.getRandomValues(b);
  else for (let i = 0; i < 16; i++) b[i] = (Math.random() * 256) | 0;
  b[6] = (b[6] & 0x0f) | 0x40;
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
