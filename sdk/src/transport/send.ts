//! One HTTP attempt: POST a JSON body to the ingest route with the bearer key, keepalive when it fits.

import { classify, type Outcome } from './retry';
import type { Log } from '../session';

/**
 * Browsers refuse keepalive requests once the bodies of all keepalive requests in
 * flight from the page exceed 64 KiB; bodies past that budget go without keepalive.
 */
export const KEEPALIVE_BUDGET = 65_536;
let keepaliveInFlight = 0;

/** Size in bytes of `s` encoded as UTF-8. */
export const byteLength = (s: string): number => new TextEncoder().encode(s).length;

/**
 * POSTs `body` to `url`. `keepalive: true` lets the request outlive the page (this is the
 * beacon-safe path: `navigator.sendBeacon` cannot carry the Authorization header the
 * route requires). Never rejects.
 */
export async function postBatch(url: string, apiKey: string, body: string, log: Log): Promise<Outcome> {
  const size = byteLength(body);
  const keepalive = keepaliveInFlight + size <= KEEPALIVE_BUDGET;
  if (keepalive) keepaliveInFlight += size;
  try {
    const res = await globalThis.fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body,
      keepalive,
      credentials: 'omit',
      mode: 'cors',
    });
    const outcome = classify(res.status);
    if (outcome !== 'ok') log(`ingest answered ${res.status}: batch ${outcome === 'retry' ? 'will be retried' : 'dropped'}`);
    return outcome;
  } catch (e) {
    log('network error, batch will be retried', e);
    return 'retry';
  } finally {
    if (keepalive) keepaliveInFlight -= size;
  }
}
