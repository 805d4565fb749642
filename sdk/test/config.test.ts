import { describe, expect, it } from 'vitest';
import { DEFAULT_FLUSH_INTERVAL_MS, DEFAULT_MAX_BATCH_SIZE, resolveConfig } from '../src/config';

describe('resolveConfig', () => {
  it('applies the contract defaults: 10 s, 50 events, no debug', () => {
    expect(resolveConfig({ apiKey: 'svc_k', ingestUrl: 'https://h/api/v1/telemetry' })).toEqual({
      apiKey: 'svc_k',
      ingestUrl: 'https://h/api/v1/telemetry',
      contentId: '',
      tags: {},
      flushIntervalMs: DEFAULT_FLUSH_INTERVAL_MS,
      maxBatchSize: DEFAULT_MAX_BATCH_SIZE,
      debug: false,
    });
    expect(DEFAULT_FLUSH_INTERVAL_MS).toBe(10_000);
    expect(DEFAULT_MAX_BATCH_SIZE).toBe(50);
  });

  it('clamps options to what works: batch 1..1000, interval >= 100 ms', () => {
    const r = (options: object) => resolveConfig({ apiKey: 'k', ingestUrl: 'u', options } as never);
    expect(r({ maxBatchSize: 5000, flushIntervalMs: 1 })).toMatchObject({ maxBatchSize: 1000, flushIntervalMs: 100 });
    expect(r({ maxBatchSize: 0 })).toMatchObject({ maxBatchSize: 1 });
    expect(r({ maxBatchSize: NaN, flushIntervalMs: Infinity })).toMatchObject({ maxBatchSize: 50, flushIntervalMs: 10_000 });
    expect(r({ debug: 'yes' })).toMatchObject({ debug: false });
  });

  it('refuses a config without apiKey or ingestUrl', () => {
    expect(typeof resolveConfig({ apiKey: '', ingestUrl: 'u' })).toBe('string');
    expect(typeof resolveConfig({ ingestUrl: 'u' } as never)).toBe('string');
    expect(typeof resolveConfig(null as never)).toBe('string');
  });
});
