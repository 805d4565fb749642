import { describe, expect, it } from 'vitest';
import { describeFailure, retryAfterSeconds, splitFailure, waitText } from '../../../src/app/forms/api-errors';

describe('describeFailure', () => {
  it('keeps the field messages of a 400', () => {
    expect(describeFailure(400, { errors: { sourceUrl: 'Hostname resolves to a private address (10.0.0.5)' } })).toEqual({
      fields: { sourceUrl: 'Hostname resolves to a private address (10.0.0.5)' },
      message: null,
    });
  });

  it('says what to do for the bare contract errors', () => {
    expect(describeFailure(401, { error: 'Unauthorized' }).message).toMatch(/signed out/);
    expect(describeFailure(404, { error: 'Not Found' }).message).toMatch(/deleted/);
    expect(describeFailure(500, { error: 'Internal Server Error' }).message).toMatch(/Try again/);
  });

  it('shows the message of { code, message } bodies, even on a 401 (sign-in)', () => {
    expect(describeFailure(400, { code: 'SIGNUP_DISABLED', message: 'Sign-up is disabled' }).message).toBe(
      'Sign-up is disabled',
    );
    expect(describeFailure(401, { code: 'INVALID_EMAIL_OR_PASSWORD', message: 'Invalid email or password' }).message).toBe(
      'Invalid email or password',
    );
  });

  it('says how long to wait after a 429 (Retry-After)', () => {
    const body = { code: 'TOO_MANY_REQUESTS', message: 'Too many requests. Please try again later.' };
    expect(describeFailure(429, body, 42).message).toBe('Too many attempts from this network. Try again in 42 seconds.');
    expect(describeFailure(429, body, 1).message).toBe('Too many attempts from this network. Try again in 1 second.');
    expect(describeFailure(429, body, 61).message).toBe('Too many attempts from this network. Try again in 2 minutes.');
    expect(describeFailure(429, body).message).toBe('Too many attempts from this network. Try again in a moment.');
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    expect(retryAfterSeconds('17')).toBe(17);
    expect(retryAfterSeconds(null)).toBeNull();
    expect(retryAfterSeconds('soon')).toBeNull();
    const now = Date.parse('2026-11-27T10:00:00Z');
    expect(retryAfterSeconds('Fri, 27 Nov 2026 10:01:30 GMT', now)).toBe(90);
    expect(waitText(60)).toBe('1 minute');
  });

  it('falls back to the status when the body is not the contract (a proxy page)', () => {
    expect(describeFailure(502, null)).toEqual({ fields: {}, message: 'The request failed (HTTP 502).' });
    expect(describeFailure(409, { error: 'Conflict' }).message).toBe('Conflict');
  });
});

describe('splitFailure', () => {
  it('moves messages for fields the form does not have into the form-level message', () => {
    const failure = describeFailure(400, { errors: { label: 'String must contain at most 120 character(s)', context: 'Expected object' } });
    expect(splitFailure(failure, (n) => n === 'label')).toEqual({
      fields: { label: 'String must contain at most 120 character(s)' },
      message: 'context: Expected object',
    });
  });
});
