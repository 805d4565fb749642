import { describe, expect, it } from 'vitest';
import { backoffMs, classify, RETRY_MAX_MS } from '../../src/transport/retry';

describe('classify', () => {
  it('treats 2xx as delivered', () => {
    expect(classify(204)).toBe('ok');
    expect(classify(200)).toBe('ok');
  });
  it('retries 5xx, 408 and 429', () => {
    for (const s of [500, 502, 503, 504, 408, 429]) expect(classify(s)).toBe('retry');
  });
  it('drops 400 and 401 and other client errors', () => {
    for (const s of [400, 401, 403, 404, 413]) expect(classify(s)).toBe('drop');
  });
});

describe('backoffMs', () => {
  it('doubles from 1 s with jitter between half and all of the step', () => {
    expect(backoffMs(1, () => 0)).toBe(500);
    expect(backoffMs(1, () => 1)).toBe(1000);
    expect(backoffMs(2, () => 0)).toBe(1000);
    expect(backoffMs(3, () => 1)).toBe(4000);
    expect(backoffMs(4, () => 0.5)).toBe(6000);
  });
  it('is capped at 30 s', () => {
    expect(backoffMs(20, () => 1)).toBe(RETRY_MAX_MS);
    expect(backoffMs(20, () => 0)).toBe(RETRY_MAX_MS / 2);
  });
});
