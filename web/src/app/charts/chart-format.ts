//! Labels and number/time formats of the charts. Pure (Intl only), so they are unit-tested;
//! times are in the viewer's zone like every other time on the dashboard.

/** Metric ids of analytics.md §3 → what an operator calls them. */
const METRIC_LABELS: Record<string, string> = {
  views: 'Views',
  playbackFailurePct: 'Playback failures',
  startupFailurePct: 'Startup failures',
  exitBeforeStartPct: 'Exits before start',
  startupTimeMs: 'Startup time',
  rebufferPct: 'Rebuffering',
  rebufferFrequency: 'Rebuffers per minute',
  watchTimeMs: 'Watch time',
  avgBitrateKbps: 'Average bitrate',
};

export function metricLabel(metric: string): string {
  return METRIC_LABELS[metric] ?? metric;
}

const decimals = (max: number) => new Intl.NumberFormat(undefined, { maximumFractionDigits: max });

/** A metric value with its unit, e.g. "2.5 %", "1,240 ms", "3,100 kbps"; "—" for no value. */
export function formatMetric(metric: string, value: number | null | undefined): string {
  if (value == null) return '—';
  if (metric.endsWith('Pct')) return `${decimals(2).format(value)} %`;
  if (metric === 'watchTimeMs') return formatDuration(value);
  if (metric.endsWith('Ms')) return `${decimals(0).format(value)} ms`;
  if (metric.endsWith('Kbps')) return `${decimals(0).format(value)} kbps`;
  if (metric === 'rebufferFrequency') return `${decimals(2).format(value)} /min`;
  return decimals(2).format(value);
}

/** Watch time is summed over many views: hours read better than millions of ms. */
function formatDuration(ms: number): string {
  const h = ms / 3_600_000;
  if (h >= 1) return `${decimals(1).format(h)} h`;
  return `${decimals(1).format(ms / 60_000)} min`;
}

/** Axis ticks: short ("1.2K"), since 375 px screens leave ~44 px per axis. */
export function formatTick(value: number): string {
  return new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 }).format(value);
}

/**
 * Tick labels of a metric's axis, with a short unit where one is needed to read the number;
 * durations switch to seconds for the whole axis once a tick reaches one.
 */
export function tickLabels(metric: string, splits: number[]): string[] {
  if (metric.endsWith('Pct')) return splits.map((v) => `${formatTick(v)}%`);
  if (metric.endsWith('Ms') && metric !== 'watchTimeMs') {
    return Math.max(...splits) >= 1000
      ? splits.map((v) => `${formatTick(v / 1000)} s`)
      : splits.map((v) => `${formatTick(v)} ms`);
  }
  return splits.map(formatTick);
}

/** The legend's time: date and time in the viewer's zone. */
export function formatInstant(unixSeconds: number, timeZone?: string, locale?: string): string {
  return new Intl.DateTimeFormat(locale, { dateStyle: 'medium', timeStyle: 'short', timeZone }).format(
    unixSeconds * 1000,
  );
}

/**
 * Time-axis tick labels in the viewer's zone and locale (uPlot's own use a fixed English
 * 12-hour form): dates when ticks are a day or more apart, else times (to the second when
 * ticks are under a minute apart), with the date added on the first tick and wherever the
 * day changes. No two neighbouring labels read the same.
 */
export function timeTicks(splits: number[], incrSeconds: number, timeZone?: string, locale?: string): string[] {
  const date = new Intl.DateTimeFormat(locale, { month: 'short', day: 'numeric', timeZone });
  // Ticks under a minute apart (probes seconds apart, one probe's ±5 min) need the seconds,
  // else neighbours read the same ("4:30 PM", "4:30 PM").
  const time = new Intl.DateTimeFormat(locale, {
    hour: 'numeric',
    minute: '2-digit',
    ...(incrSeconds < 60 ? { second: '2-digit' as const } : {}),
    timeZone,
  });
  if (incrSeconds >= 86400) return splits.map((s) => date.format(s * 1000));
  let lastDay = '';
  return splits.map((s) => {
    const day = date.format(s * 1000);
    const label = time.format(s * 1000);
    if (day === lastDay) return label;
    lastDay = day;
    return `${label}\n${day}`;
  });
}
