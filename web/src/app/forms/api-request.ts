//! One JSON request to the API with the session cookie, answered as success or `Failure`.

import { describeFailure, NETWORK_FAILURE, retryAfterSeconds } from './api-errors';
import type { Failure } from './api-errors';

export type Result = { ok: true; status: number; body: unknown } | { ok: false; failure: Failure };

export async function sendJson(method: string, url: string, body?: unknown): Promise<Result> {
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      credentials: 'same-origin',
      headers: body === undefined ? { accept: 'application/json' } : { accept: 'application/json', 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    return { ok: false, failure: NETWORK_FAILURE };
  }
  const text = await res.text().catch(() => '');
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // A proxy's HTML error page: the status alone is described.
  }
  return res.ok
    ? { ok: true, status: res.status, body: parsed }
    : { ok: false, failure: describeFailure(res.status, parsed, retryAfterSeconds(res.headers.get('retry-after'))) };
}
