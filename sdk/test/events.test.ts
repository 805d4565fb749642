import { describe, expect, it } from 'vitest';
import { cut, finite, isoMs, SCHEMA, toWirePayload } from '../src/events';

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

describe('optional payload fields', () => {
  it('keeps startupMs, width and height when finite and at least 0, rounded', () => {
    expect(toWirePayload('playback_start', { positionMs: 0, durationMs: 0, contentId: 'c', startupMs: 412.6 })).toEqual({
      positionMs: 0,
      durationMs: 0,
      contentId: 'c',
      startupMs: 413,
    });
    expect(toWirePayload('quality_change', { height: 720, width: 1280, from: '', to: '720p', bitrate: 1 })).toEqual({
      from: '',
      to: '720p',
      bitrate: 1,
      width: 1280,
      height: 720,
    });
    expect(JSON.stringify(toWirePayload('quality_change', { from: '', to: 'a', bitrate: 1, width: 0, height: 0 }))).toBe(
      '{"from":"","to":"a","bitrate":1,"width":0,"height":0}',
    );
  });

  it('leaves out an optional field that is absent, negative, non-finite or not a number, and keeps the event', () => {
    const start = { positionMs: 0, durationMs: 0, contentId: 'c' };
    for (const startupMs of [undefined, -1, -0.6, NaN, Infinity, '412', null]) {
      expect(toWirePayload('playback_start', { ...start, startupMs }), String(startupMs)).toEqual(start);
    }
    const q = { from: 'a', to: 'b', bitrate: 1 };
    expect(toWirePayload('quality_change', { ...q, width: -1, height: 720 })).toEqual({ ...q, height: 720 });
    expect(toWirePayload('quality_change', { ...q, width: '1280', height: Infinity })).toEqual(q);
  });
});

describe('cut', () => {
  it('counts code points like the server and never splits a surrogate pair', () => {
    expect(cut('😀'.repeat(3), 2)).toBe('😀😀');
    expect(cut('ab😀', 3)).toBe('ab😀');
    expect(cut('abcd', 3)).toBe('abc');
  });

  it('replaces lone surrogates (the server refuses them as invalid JSON)', () => {
    expect(cut('a\ud83d', 10)).toBe('a\ufffd');
    expect(cut('\ude00b\ud83d\ude00', 10)).toBe('\ufffdb😀');
    expect(JSON.stringify(cut('x\udc00', 5))).toBe('"x\ufffd"');
  });
});

describe('isoMs', () => {
  it('formats YYYY-MM-DDTHH:MM:SS.sssZ', () => {
    expect(isoMs(Date.UTC(2026, 10, 21, 9, 5, 3, 7))).toBe('2026-11-21T09:05:03.007Z');
  });
});
