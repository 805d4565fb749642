import { describe, expect, it } from 'vitest';
import { describeFailure, splitFailure } from '../../../src/app/forms/api-errors';

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
