//! Every kind's options have exactly one series per data column (a mismatch draws nothing).
import { describe, expect, it } from 'vitest';
import { latencyModel, timelineModel, timeseriesModel } from '../../../src/app/charts/chart-data';
import {
  latencyOptions,
  lonePoints,
  sparklineColumns,
  sparklineOptions,
  timelineOptions,
  timeseriesColumns,
  timeseriesOptions,
} from '../../../src/app/charts/chart-options';
import type { ChartTheme } from '../../../src/app/charts/chart-theme';

const theme = new Proxy({}, { get: (_t, key) => `var-${String(key)}` }) as ChartTheme;
const size = { width: 343, height: 200 };
const ts = (metric: string) => timeseriesModel({ metric, items: [{ t: '2026-11-23T10:00:00.000Z', value: 3, views: 4 }] });

describe('series match columns', () => {
  it('timeseries draws views as bars under the metric, and no views series for metric=views', () => {
    const o = timeseriesOptions(ts('rebufferPct'), theme, size);
    expect(o.series.map((x) => x.label)).toEqual([undefined, 'Views', 'Rebuffering']);
    expect(timeseriesColumns(ts('rebufferPct'))).toHaveLength(o.series.length);
    expect(timeseriesOptions(ts('views'), theme, size).series).toHaveLength(timeseriesColumns(ts('views')).length);
    expect(timeseriesOptions(ts('views'), theme, size, 'Plays').series[1].label).toBe('Plays');
  });

  it('sparkline, latency and timeline', () => {
    expect(sparklineOptions(ts('views'), theme, size).series).toHaveLength(sparklineColumns(ts('views')).length);
    const lat = latencyModel({ items: [] });
    expect(latencyOptions(lat, theme, size).series).toHaveLength(lat.columns.length);
    const tl = timelineModel({ items: [] });
    const o = timelineOptions(tl, theme, size);
    expect(o.series).toHaveLength(tl.columns.length);
    expect(o.axes?.map((a) => a.scale)).toEqual([undefined, 'probes', 'pct']);
  });

  it('never asks for a plot wider than given', () => {
    expect(timelineOptions(timelineModel({ items: [] }), theme, size).width).toBe(343);
  });
});

describe('lonePoints', () => {
  const plot = (ys: (number | null)[]) => ({ data: [ys.map((_, i) => i), ys] }) as unknown as Parameters<typeof lonePoints>[0];
  it('marks values with no neighbour, which a line cannot draw', () => {
    expect(lonePoints(plot([null, null, 3]), 1, false)).toEqual([2]);
    expect(lonePoints(plot([4, null, 3, 5, null, null, 1, null]), 1, false)).toEqual([0, 6]);
    expect(lonePoints(plot([1, 2, 3]), 1, false)).toBeNull();
  });
  it('adds nothing where every point is shown anyway', () => {
    expect(lonePoints(plot([null, 3, null]), 1, true)).toBeNull();
  });
});
