//! uPlot options of each chart kind: series, scales and axes, colored from the CSS theme.

import uPlot from 'uplot';
import type { LatencyModel, TimelineModel, TimeseriesModel } from './chart-data';
import { formatInstant, formatMetric, metricLabel, tickLabels, timeTicks } from './chart-format';
import type { ChartTheme } from './chart-theme';

export interface Size {
  width: number;
  height: number;
}

type Fmt = (v: number | null) => string;
/** A legend value formatter (uPlot passes the plot and the raw value first). */
const shown = (fmt: Fmt): uPlot.Series['value'] => (_u, v) => fmt(v);

const timeSeries = (): uPlot.Series => ({ value: shown((v) => (v == null ? '—' : formatInstant(v))) });

function xAxis(theme: ChartTheme): uPlot.Axis {
  return {
    stroke: theme.text,
    grid: { stroke: theme.grid, width: 1 },
    ticks: { stroke: theme.grid, width: 1 },
    // Labels with seconds (ticks under a minute apart, when the range is a few minutes) are wider.
    space: (_u, _axis, min, max) => (max - min < 1200 ? 100 : 70),
    values: (_u, splits, _axis, _space, incr) => timeTicks(splits, incr),
  };
}

/** Tick steps of count axes (probes, views): no "2.5 probes". */
const COUNT_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];

/** A y axis as wide as its longest tick label ("1.5 s", "150"), so none is cut off. */
const fitTicks: uPlot.Axis.Size = (u, values, axisIdx, cycleNum) => {
  const axis = u.axes[axisIdx];
  // uPlot asks again while it settles the layout; keeping the earlier size lets it converge.
  if (cycleNum > 1) return (axis as { _size?: number })._size ?? 50;
  const longest = (values ?? []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), '');
  u.ctx.font = (axis.font as unknown as string[])[0];
  const text = longest ? u.ctx.measureText(longest).width / devicePixelRatio : 0;
  return Math.ceil((axis.ticks?.size ?? 10) + (axis.gap ?? 5) + text + 4);
};

interface AxisOpts {
  right?: boolean;
  /** The metric whose unit the ticks show, or `count` for whole numbers. */
  unit?: string;
}

function yAxis(theme: ChartTheme, scale: string, { right = false, unit = '' }: AxisOpts = {}): uPlot.Axis {
  return {
    scale,
    side: right ? 1 : 3,
    stroke: theme.text,
    // One grid is enough; a second one from the right axis would not line up with it.
    grid: right ? { show: false } : { stroke: theme.grid, width: 1 },
    ticks: { stroke: theme.grid, width: 1 },
    size: fitTicks,
    ...(unit === 'count' ? { incrs: COUNT_STEPS } : {}),
    values: (_u, splits) => tickLabels(unit, splits),
  };
}

/** Scales that start at zero: counts, latencies and percentages are read against it. */
const fromZero: uPlot.Scale = { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] };

/**
 * A time scale that stays readable with a single instant (one probe, one bucket): five
 * minutes on each side instead of uPlot's degenerate axis. (uPlot widens a lone x value to
 * 1,000 days before asking this range, so the data is read, not min and max: that axis read
 * "May 1, Nov 1, May 1" with the probe at its left edge.)
 */
const pointTime: uPlot.Scale = {
  time: true,
  range: (u, min, max) => {
    const xs = u.data[0];
    const only = xs.length > 0 && xs[0] === xs[xs.length - 1] ? xs[0] : null;
    return only === null ? [min, max] : [only - 300, only + 300];
  },
};

/**
 * The values of a line series with no value on either side (one non-empty bucket on a new
 * install): a line needs two points, so these are drawn as dots, also where uPlot hides the
 * points of a dense series. Where uPlot shows every point anyway, nothing to add.
 */
export const lonePoints = (u: uPlot, si: number, show: boolean): number[] | null => {
  if (show) return null;
  const ys = u.data[si] as (number | null | undefined)[];
  const has = (i: number): boolean => ys[i] !== null && ys[i] !== undefined;
  const lone: number[] = [];
  for (let i = 0; i < ys.length; i++) if (has(i) && !has(i - 1) && !has(i + 1)) lone.push(i);
  return lone.length > 0 ? lone : null;
};

/**
 * The time scale of a chart with bars: half a bucket more on each side, so the first and last
 * bars are drawn whole instead of cut at the plot's edges.
 */
const barTime: uPlot.Scale = {
  time: true,
  range: (u, min, max) => {
    const xs = u.data[0];
    const half = xs.length > 1 ? (xs[1] - xs[0]) / 2 : 1800;
    return [min - half, max + half];
  },
};

const bars = (fill: string): Partial<uPlot.Series> => ({
  fill,
  stroke: fill,
  width: 0,
  points: { show: false },
  paths: uPlot.paths.bars!({ size: [0.7, 48], gap: 1 }),
});

export function timeseriesOptions(model: TimeseriesModel, theme: ChartTheme, size: Size, label?: string): uPlot.Options {
  const metric = model.metric;
  const series: uPlot.Series[] = [timeSeries()];
  const axes: uPlot.Axis[] = [xAxis(theme), yAxis(theme, 'y', { unit: metric === 'views' ? 'count' : metric })];
  if (metric !== 'views') {
    // Views first, so the metric's line is drawn over the bars.
    series.push({ label: 'Views', scale: 'views', ...bars(theme.secondFill), value: shown((v) => formatMetric('views', v)) });
    axes.push(yAxis(theme, 'views', { right: true, unit: 'count' }));
  }
  series.push({
    label: label || metricLabel(metric),
    scale: 'y',
    stroke: theme.line,
    width: 2,
    spanGaps: false,
    points: { size: 7, fill: theme.line, filter: lonePoints },
    value: shown((v) => formatMetric(metric, v)),
  });
  return { ...size, series, axes, scales: { x: metric === 'views' ? pointTime : barTime, y: fromZero, views: fromZero } };
}

/** Reorders model columns to the series order of timeseriesOptions. */
export function timeseriesColumns(model: TimeseriesModel): uPlot.AlignedData {
  const [x, value, views] = model.columns;
  return (model.metric === 'views' ? [x, value] : [x, views, value]) as uPlot.AlignedData;
}

export function sparklineOptions(model: TimeseriesModel, theme: ChartTheme, size: Size): uPlot.Options {
  return {
    ...size,
    legend: { show: false },
    cursor: { show: false },
    // Room on every side for a whole dot: the newest bucket, often the only one, is at the edge.
    padding: [4, 4, 4, 4],
    axes: [{ show: false }, { show: false }],
    scales: { x: pointTime, y: fromZero },
    series: [{}, { stroke: theme.line, fill: theme.lineFill, width: 2, spanGaps: false, points: { show: false, size: 6, fill: theme.line, filter: lonePoints } }],
  };
}

export function sparklineColumns(model: TimeseriesModel): uPlot.AlignedData {
  return model.columns.slice(0, 2) as uPlot.AlignedData;
}

export function latencyOptions(_model: LatencyModel, theme: ChartTheme, size: Size): uPlot.Options {
  // One point-only series per severity: uPlot colors per series, not per point.
  const points = (label: string, color: string): uPlot.Series => ({
    label,
    stroke: color,
    width: 0,
    paths: () => null,
    points: { show: true, size: 7, fill: color, stroke: color },
    value: shown((v) => formatMetric('latencyMs', v)),
  });
  return {
    ...size,
    series: [
      timeSeries(),
      points('Healthy (info)', theme.healthy),
      points('Degraded (warn)', theme.degraded),
      points('Failing (critical)', theme.failing),
    ],
    axes: [xAxis(theme), yAxis(theme, 'y', { unit: 'latencyMs' })],
    scales: { x: pointTime, y: fromZero },
  };
}

export function timelineOptions(model: TimelineModel, theme: ChartTheme, size: Size): uPlot.Options {
  const count = (list: number[]): uPlot.Series['value'] => (_u, _v, _s, i) => (i == null ? '—' : String(list[i]));
  const line = (label: string, color: string, metric: string, dash?: number[]): uPlot.Series => ({
    label,
    scale: 'pct',
    stroke: color,
    width: 2.5,
    dash,
    spanGaps: false,
    points: { size: 7, fill: color, filter: lonePoints },
    value: shown((v) => formatMetric(metric, v)),
  });
  // Values an operator wants at the cursor but that have no axis of their own here: listed in
  // the legend, not drawn (a legend click still draws them on their own scale).
  const legendOnly = (label: string, scale: string, metric: string): uPlot.Series => ({
    label,
    scale,
    show: false,
    stroke: theme.text,
    width: 1,
    value: shown((v) => formatMetric(metric, v)),
  });
  const probes = (label: string, color: string, counts: number[]): uPlot.Series => ({
    label,
    scale: 'probes',
    ...bars(color),
    value: count(counts),
  });
  return {
    ...size,
    series: [
      timeSeries(),
      probes('Failing probes', theme.failing, model.counts.failing),
      probes('Degraded probes', theme.degraded, model.counts.degraded),
      probes('Healthy probes', theme.healthy, model.counts.healthy),
      line('Playback failures', theme.line, 'playbackFailurePct'),
      line('Rebuffering', theme.third, 'rebufferPct', [6, 3]),
      legendOnly('Views', 'views', 'views'),
      legendOnly('Probe latency p50', 'ms', 'latencyMs'),
      legendOnly('Startup time p50', 'ms', 'startupTimeMs'),
    ],
    axes: [xAxis(theme), yAxis(theme, 'probes', { unit: 'count' }), yAxis(theme, 'pct', { right: true, unit: 'rebufferPct' })],
    scales: { x: barTime, probes: fromZero, pct: fromZero, views: fromZero, ms: fromZero },
  };
}
