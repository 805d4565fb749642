import { describe, expect, it } from 'vitest';
import { formatLocal, formatRelative, formatUtc, parseInstant } from '../../src/app/local-time';

const at = new Date('2026-11-23T10:00:00.000Z');

describe('formatLocal', () => {
  it('shows the instant in the given zone, short date and time', () => {
    expect(formatLocal(at, 'en-US', 'Asia/Kolkata')).toBe('11/23/26, 3:30 PM');
    expect(formatLocal(at, 'en-GB', 'America/New_York')).toBe('23/11/2026, 05:00');
  });
});

describe('formatUtc', () => {
  it('is the stored instant in UTC to the second', () => {
    expect(formatUtc(at)).toBe('2026-11-23 10:00:00 UTC');
  });
});

describe('formatRelative', () => {
  const rel = (ms: number) => formatRelative(new Date(at.getTime() + ms), at, 'en');
  it('says now for a few seconds either way (clock skew)', () => {
    expect(rel(-4000)).toBe('now');
    expect(rel(6000)).toBe('now');
  });
  it('uses the largest whole unit', () => {
    expect(rel(-45_000)).toBe('45 seconds ago');
    expect(rel(-3 * 60_000)).toBe('3 minutes ago');
    expect(rel(-2 * 3600_000)).toBe('2 hours ago');
    expect(rel(-26 * 3600_000)).toBe('yesterday');
    expect(rel(-40 * 86400_000)).toBe('last month');
    expect(rel(2 * 3600_000)).toBe('in 2 hours');
  });
});

describe('parseInstant', () => {
  it('accepts ISO instants only', () => {
    expect(parseInstant('2026-11-23T10:00:00.000Z')?.toISOString()).toBe('2026-11-23T10:00:00.000Z');
    expect(parseInstant('2026-11-23')).toBeNull();
    expect(parseInstant('soon T')).toBeNull();
    expect(parseInstant(null)).toBeNull();
  });
});
