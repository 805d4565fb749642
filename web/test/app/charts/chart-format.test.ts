import { describe, expect, it } from 'vitest';
import { formatInstant, formatMetric, formatTick, metricLabel, tickLabels, timeTicks } from '../../../src/app/charts/chart-format';

describe('formatMetric', () => {
  it('puts each metric in its unit', () => {
    expect(formatMetric('rebufferPct', 1.234)).toBe('1.23 %');
    expect(formatMetric('startupTimeMs', 1240.4)).toBe('1,240 ms');
    expect(formatMetric('avgBitrateKbps', 3100)).toBe('3,100 kbps');
    expect(formatMetric('rebufferFrequency', 0.456)).toBe('0.46 /min');
    expect(formatMetric('watchTimeMs', 5_400_000)).toBe('1.5 h');
    expect(formatMetric('watchTimeMs', 90_000)).toBe('1.5 min');
    expect(formatMetric('views', 1200)).toBe('1,200');
    expect(formatMetric('views', null)).toBe('—');
  });
  it('names metrics as people do', () => {
    expect(metricLabel('playbackFailurePct')).toBe('Playback failures');
    expect(metricLabel('tag.custom')).toBe('tag.custom');
  });
});

describe('axis ticks', () => {
  it('are compact', () => {
    expect(formatTick(1500)).toBe('1.5K');
    expect(formatTick(12)).toBe('12');
  });
  it('carry the unit needed to read them', () => {
    expect(tickLabels('rebufferPct', [0, 2.5])).toEqual(['0%', '2.5%']);
    expect(tickLabels('latencyMs', [0, 250, 500])).toEqual(['0 ms', '250 ms', '500 ms']);
    expect(tickLabels('startupTimeMs', [0, 500, 1000, 1500])).toEqual(['0 s', '0.5 s', '1 s', '1.5 s']);
    expect(tickLabels('count', [0, 12000])).toEqual(['0', '12K']);
  });
});

describe('timeTicks', () => {
  const s = (iso: string) => Date.parse(iso) / 1000;
  it('shows times in the zone, with the date where the day changes', () => {
    const splits = ['2026-11-23T16:00:00Z', '2026-11-23T17:00:00Z', '2026-11-23T18:00:00Z', '2026-11-23T19:00:00Z'].map(s);
    expect(timeTicks(splits, 3600, 'Asia/Kolkata', 'en-US')).toEqual(['9:30 PM\nNov 23', '10:30 PM', '11:30 PM', '12:30 AM\nNov 24']);
  });
  it('shows seconds when ticks are under a minute apart, so no two labels repeat', () => {
    const splits = [0, 10, 20, 30].map((d) => s('2026-11-23T11:00:00Z') + d);
    const labels = timeTicks(splits, 10, 'UTC', 'en-US');
    expect(labels).toEqual(['11:00:00 AM\nNov 23', '11:00:10 AM', '11:00:20 AM', '11:00:30 AM']);
    expect(new Set(labels).size).toBe(labels.length);
  });
  it('shows dates when ticks are days apart', () => {
    expect(timeTicks([s('2026-11-23T12:00:00Z'), s('2026-11-24T12:00:00Z')], 86400, 'UTC', 'en-US')).toEqual(['Nov 23', 'Nov 24']);
  });
  it('gives the legend time in the zone', () => {
    expect(formatInstant(s('2026-11-23T10:00:00Z'), 'Asia/Kolkata', 'en-US')).toBe('Nov 23, 2026, 3:30 PM');
  });
});
