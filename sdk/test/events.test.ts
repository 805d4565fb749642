import { describe, expect, it } from 'vitest';
import { finite, isoMs, SCHEMA, toWirePayload } from '../src/events';

describe('toWirePayload', () => {
  it('knows exactly the eight contract types', () => {
    expect(Object.keys(SCHEMA).sort()).toEqual(
      ['error', 'playback_pause', 'playback_resume', 'playback_start', 'quality_change', 'rebuffer_end', 'rebuffer_start', 'session_end'],
    );
  });

  it('keeps only the schema fields and rounds numbers', () => {
    expect(toWirePayload('quality_change', { to: '720p', from: '360p', bitrate: 1500000.7, x: 1 })).toEqual({
      from: '360p',
      to: '720p',
      bitrate: 1500001,
    });
  });

  it('refuses missing or mistyped fields and unknown types', () => {
    expect(toWirePayload('error', { code: 1, message: 'm', fatal: true })).toBeUndefined();
    expect(toWirePayload('error', { code: 'c', message: 'm', fatal: 'true' })).toBeUndefined();
    expect(toWirePayload('playback_start', { positionMs: 0, durationMs: 0 })).toBeUndefined();
    expect(toWirePayload('nope', {})).toBeUndefined();
    expect(toWirePayload('__proto__', {})).toBeUndefined();
    expect(toWirePayload('error', null)).toBeUndefined();
  });

  it('sends non-finite numbers as 0 and cuts long strings', () => {
    expect(finite(NaN)).toBe(0);
    expect(finite(Infinity)).toBe(0);
    expect(finite(-Infinity)).toBe(0);
    expect(finite(undefined)).toBe(0);
    const p = toWirePayload('error', { code: 'c', message: 'x'.repeat(5000), fatal: false })!;
    expect((p.message as string).length).toBe(1024);
  });
});

describe('isoMs', () => {
  it('formats YYYY-MM-DDTHH:MM:SS.sssZ', () => {
    expect(isoMs(Date.UTC(2026, 10, 21, 9, 5, 3, 7))).toBe('2026-11-21T09:05:03.007Z');
  });
});
