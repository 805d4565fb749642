import { describe, expect, it } from 'vitest';
import { latencyModel, timelineModel, timeseriesModel } from '../../../src/app/charts/chart-data';

const s = (iso: string) => Date.parse(iso) / 1000;

describe('timeseriesModel', () => {
  it('gives x in seconds, value with gaps as null, and views', () => {
    const m = timeseriesModel({
      metric: 'rebufferPct',
      granularity: 'hour',
      items: [
        { t: '2026-11-23T10:00:00.000Z', value: 1.25, views: 40 },
        { t: '2026-11-23T11:00:00.000Z', value: null, views: 0 },
        { t: '2026-11-23T12:00:00.000Z', value: 0.5, views: 12 },
      ],
    });
    expect(m.columns).toEqual([
      [s('2026-11-23T10:00:00.000Z'), s('2026-11-23T11:00:00.000Z'), s('2026-11-23T12:00:00.000Z')],
      [1.25, null, 0.5],
      [40, 0, 12],
    ]);
    expect(m.empty).toBe(false);
  });

  it('is empty when every bucket is empty or there are none', () => {
    expect(timeseriesModel({ metric: 'views', items: [{ t: '2026-11-23T10:00:00.000Z', value: null, views: 0 }] }).empty).toBe(true);
    expect(timeseriesModel({ metric: 'views', items: [] }).empty).toBe(true);
    expect(timeseriesModel({} as never).empty).toBe(true);
  });
});

describe('latencyModel', () => {
  const feed = {
    items: [
      { createdAt: '2026-11-23T10:02:00.000Z', latencyMs: 2400, severity: 'critical', streamId: 'a' },
      { createdAt: '2026-11-23T10:01:00.000Z', latencyMs: 900, severity: 'warn', streamId: 'b' },
      { createdAt: '2026-11-23T10:00:00.000Z', latencyMs: 120, severity: 'info', streamId: 'a' },
    ],
  };

  it('sorts the newest-first feed ascending and splits latency by severity', () => {
    expect(latencyModel(feed).columns).toEqual([
      [s('2026-11-23T10:00:00.000Z'), s('2026-11-23T10:01:00.000Z'), s('2026-11-23T10:02:00.000Z')],
      [120, null, null],
      [null, 900, null],
      [null, null, 2400],
    ]);
  });

  it('keeps one stream when asked', () => {
    const m = latencyModel(feed, 'a');
    expect(m.columns[0]).toHaveLength(2);
    expect(latencyModel(feed, 'zzz').empty).toBe(true);
  });
});

describe('timelineModel', () => {
  const bucket = (t: string, h: number, d: number, f: number, views: number) => ({
    t,
    probes: { healthy: h, degraded: d, failing: f, p50LatencyMs: h + d + f ? 180 : null },
    viewers: { views, playbackFailurePct: views ? 2.5 : null, rebufferPct: views ? 0.8 : null, startupTimeMs: views ? 950 : null },
  });

  it('stacks probe counts (failing on top) and keeps the raw counts for the legend', () => {
    const m = timelineModel({
      items: [bucket('2026-11-23T10:00:00.000Z', 10, 2, 1, 30), bucket('2026-11-23T11:00:00.000Z', 12, 0, 0, 0)],
    });
    const [x, failTop, degTop, healthyTop, failPct, rebufPct, views, p50, startup] = m.columns;
    expect(x).toEqual([s('2026-11-23T10:00:00.000Z'), s('2026-11-23T11:00:00.000Z')]);
    expect(failTop).toEqual([13, null]);
    expect(degTop).toEqual([12, null]);
    expect(healthyTop).toEqual([10, 12]);
    expect([failPct, rebufPct, views, p50, startup]).toEqual([[2.5, null], [0.8, null], [30, 0], [180, 180], [950, null]]);
    expect(m.counts).toEqual({ healthy: [10, 12], degraded: [2, 0], failing: [1, 0] });
    expect(m.empty).toBe(false);
  });

  it('is empty when no bucket has a probe or a view', () => {
    expect(timelineModel({ items: [bucket('2026-11-23T10:00:00.000Z', 0, 0, 0, 0)] }).empty).toBe(true);
  });
});
