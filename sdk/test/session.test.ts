import { afterEach, describe, expect, it, vi } from 'vitest';
import { guard, makeLog, monotonicClock, newSessionId } from '../src/session';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
afterEach(() => vi.unstubAllGlobals());

describe('newSessionId', () => {
  it('is a version 7 UUID whose first 48 bits are the time in ms', () => {
    const id = newSessionId(() => 1_714_521_600_123);
    expect(id).toMatch(UUID);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(1_714_521_600_123);
  });
  it('sorts by creation time, and ids of the same millisecond differ', () => {
    const ids = [1, 2, 1_000, 1_714_521_600_000].map((t) => newSessionId(() => t));
    expect([...ids].sort()).toEqual(ids);
    const same = new Set(Array.from({ length: 50 }, () => newSessionId(() => 7)));
    expect(same.size).toBe(50);
  });
  it('takes its random bits from crypto.getRandomValues, or Math.random without crypto', () => {
    vi.stubGlobal('crypto', { getRandomValues: (b: Uint8Array) => b.fill(255) });
    expect(newSessionId(() => 0)).toBe('00000000-0000-7fff-bfff-ffffffffffff');
    vi.stubGlobal('crypto', undefined);
    const ids = new Set(Array.from({ length: 50 }, () => newSessionId()));
    expect(ids.size).toBe(50);
    for (const id of ids) expect(id).toMatch(UUID);
  });
});

describe('monotonicClock', () => {
  it('strictly increases even when the wall clock stands still or goes back', () => {
    const times = [5, 5, 5, 3, 10];
    const clock = monotonicClock(() => times.shift()!);
    expect([clock(), clock(), clock(), clock(), clock()]).toEqual([5, 6, 7, 8, 10]);
  });
});

describe('guard and makeLog', () => {
  it('turns a throw into a log line and undefined', () => {
    const log = vi.fn();
    expect(guard(log, () => { throw new Error('x'); })()).toBeUndefined();
    expect(log).toHaveBeenCalledWith('internal error', expect.any(Error));
    expect(guard(log, (a: number) => a + 1)(1)).toBe(2);
  });
  it('logs only with debug', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    makeLog(false)('quiet');
    makeLog(true)('loud');
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn).toHaveBeenCalledWith('[player-sdk]', 'loud');
    warn.mockRestore();
  });
});
