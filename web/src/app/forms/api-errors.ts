//! Maps an API failure (interface.md "Errors", decisions.md §10 auth bodies) to what the page
//! shows: a message per field and one sentence for the whole form.

export interface Failure {
  /** `{ errors: { field: message } }` of a 400. */
  fields: Record<string, string>;
  /** A sentence for the form as a whole, or null when the field messages say it all. */
  message: string | null;
}

export const NETWORK_FAILURE: Failure = {
  fields: {},
  message: 'Could not reach the server. Check your connection and try again.',
};

/** The contract's bare `{ error }` bodies say little to a person; these say what to do. */
const BY_STATUS: Record<number, string> = {
  401: 'You are signed out. Sign in again, then retry.',
  404: 'Not found: it may have been deleted already. Reload the page.',
  500: 'The server failed to do this. Try again in a moment.',
};

/** `Retry-After` in seconds (RFC 9110: a delay in seconds, or an HTTP date), or null. */
export function retryAfterSeconds(header: string | null, now = Date.now()): number | null {
  if (!header) return null;
  const value = header.trim();
  if (/^\d+$/.test(value)) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - now) / 1000));
}

/** "42 seconds", "1 minute", "3 minutes": how long to wait, rounded up to what a person reads. */
export function waitText(seconds: number): string {
  if (seconds < 60) return seconds === 1 ? '1 second' : `${Math.max(0, seconds)} seconds`;
  const minutes = Math.ceil(seconds / 60);
  return minutes === 1 ? '1 minute' : `${minutes} minutes`;
}

export function describeFailure(status: number, body: unknown, retryAfter: number | null = null): Failure {
  const b = (body && typeof body === 'object' ? body : {}) as Record<string, unknown>;
  // A rate limit (sign-in, sign-up) says how long to wait, not only "later".
  if (status === 429) {
    const wait = retryAfter === null ? 'a moment' : waitText(retryAfter);
    return { fields: {}, message: `Too many attempts from this network. Try again in ${wait}.` };
  }
  if (b.errors && typeof b.errors === 'object') {
    const fields: Record<string, string> = {};
    for (const [k, v] of Object.entries(b.errors as Record<string, unknown>)) fields[k] = String(v);
    if (Object.keys(fields).length) return { fields, message: null };
  }
  // `{ code, message }` (sign-in, sign-up) carries a sentence meant for people.
  if (typeof b.message === 'string' && b.message) return { fields: {}, message: b.message };
  if (BY_STATUS[status]) return { fields: {}, message: BY_STATUS[status] };
  const text = typeof b.error === 'string' ? b.error : null;
  return { fields: {}, message: text || `The request failed (HTTP ${status}).` };
}

/**
 * Field messages for names the form has no control for (e.g. `context`, `from`) cannot be
 * shown beside a field; they join the form-level message instead of being lost.
 */
export function splitFailure(failure: Failure, hasField: (name: string) => boolean): Failure {
  const fields: Record<string, string> = {};
  const rest: string[] = [];
  for (const [name, msg] of Object.entries(failure.fields)) {
    if (hasField(name)) fields[name] = msg;
    else rest.push(`${name}: ${msg}`);
  }
  const message = [failure.message, ...rest].filter(Boolean).join(' ');
  return { fields, message: message || null };
}
