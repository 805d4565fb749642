//! Retry policy: which responses are worth another try, and the jittered backoff between tries.

/** What to do with a batch after one send attempt. */
export type Outcome = 'ok' | 'retry' | 'drop';

/** First retry delay, ms. */
export const RETRY_BASE_MS = 1000;
/** Longest retry delay, ms. */
export const RETRY_MAX_MS = 30_000;
/** Attempts per batch including the first; then the batch is dropped and counted. */
export const MAX_ATTEMPTS = 8;

/**
 * 2xx is done. 408, 429 and 5xx are retried: the route is idempotent (rows are keyed by
 * sessionId, ts and type), so a repeat is harmless. Any other status (400 bad batch,
 * 401 bad key) would fail again the same way, so the batch is dropped.
 */
export function classify(status: number): Outcome {
  if (status >= 200 && status < 300) return 'ok';
  if (status === 408 || status === 429 || status >= 500) return 'retry';
  return 'drop';
}

/**
 * Delay before retry number `attempt` (1 = first retry): exponential from 1 s, capped
 * at 30 s, with "equal jitter" (between half and all of it) so that many players cut
 * off by the same outage do not come back in lockstep.
 */
export function backoffMs(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}
