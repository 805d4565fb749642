//! Turns the JSON bodies of the API (analytics.md §4, interface.md agent feed) into uPlot's
//! column arrays. Pure functions: no DOM, no uPlot, so they are unit-tested in node.

type Num = number | null;

/** `GET /api/v1/qoe/timeseries` */
export interface TimeseriesBody {
  metric: string;
  granularity?: string;
  items: { t: string; value: Num; views: number }[];
}

/** `GET /api/v1/agents` (only the fields the chart reads) */
export interface AgentFeedBody {
  items: { createdAt: string; latencyMs: number; severity: string; streamId?: string }[];
}

/** `GET /api/v1/streams/{id}/timeline` */
export interface TimelineBody {
  items: {
    t: string;
    probes: { healthy: number; degraded: number; failing: number; p50LatencyMs: Num };
    viewers: { views: number; playbackFailurePct: Num; rebufferPct: Num; startupTimeMs: Num };
  }[];
}

/** x (Unix seconds, ascending) first, then one column per series. */
export type Columns = [number[], ...Num[][]];

export interface TimeseriesModel {
  metric: string;
  columns: Columns; // x, value, views
  empty: boolean;
}

export interface LatencyModel {
  columns: Columns; // x, then latency per severity (null where the probe has another one)
  empty: boolean;
}

export interface TimelineModel {
  /** x; stacked tops failing ≥ degraded ≥ healthy; failure %, rebuffer %; views, p50 latency, startup. */
  columns: Columns;
  /** Probe counts per outcome as they came, for the legend (the stacked columns are sums). */
  counts: { healthy: number[]; degraded: number[]; failing: number[] };
  empty: boolean;
}

/** The closed set of severities, in legend order, with the probe outcome each stands for. */
export const SEVERITIES = ['info', 'warn', 'critical'] as const;

const seconds = (iso: string): number => Date.parse(iso) / 1000;
const num = (v: unknown): Num => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const byTime = <T>(key: (item: T) => number) => (a: T, b: T) => key(a) - key(b);

function items<T>(body: unknown): T[] {
  const list = (body as { items?: unknown } | null)?.items;
  return Array.isArray(list) ? (list as T[]) : [];
}

export function timeseriesModel(body: TimeseriesBody): TimeseriesModel {
  const rows = items<TimeseriesBody['items'][number]>(body)
    .filter((r) => Number.isFinite(seconds(r.t)))
    .sort(byTime((r) => seconds(r.t)));
  const value = rows.map((r) => num(r.value));
  return {
    metric: String(body?.metric ?? ''),
    columns: [rows.map((r) => seconds(r.t)), value, rows.map((r) => num(r.views) ?? 0)],
    // Buckets with no views carry `value: null`: a range of only those has nothing to draw.
    empty: value.every((v) => v === null),
  };
}

export function latencyModel(body: AgentFeedBody, streamId?: string): LatencyModel {
  const rows = items<AgentFeedBody['items'][number]>(body)
    .filter((r) => !streamId || r.streamId === streamId)
    .filter((r) => Number.isFinite(seconds(r.createdAt)) && num(r.latencyMs) !== null)
    .filter((r) => (SEVERITIES as readonly string[]).includes(r.severity))
    // The feed is newest first; uPlot needs ascending x.
    .sort(byTime((r) => seconds(r.createdAt)));
  const perSeverity = SEVERITIES.map((s) => rows.map((r) => (r.severity === s ? r.latencyMs : null)));
  return { columns: [rows.map((r) => seconds(r.createdAt)), ...perSeverity], empty: rows.length === 0 };
}

export function timelineModel(body: TimelineBody): TimelineModel {
  const rows = items<TimelineBody['items'][number]>(body)
    .filter((r) => Number.isFinite(seconds(r.t)) && r.probes && r.viewers)
    .sort(byTime((r) => seconds(r.t)));
  const healthy = rows.map((r) => num(r.probes.healthy) ?? 0);
  const degraded = rows.map((r) => num(r.probes.degraded) ?? 0);
  const failing = rows.map((r) => num(r.probes.failing) ?? 0);
  // Bars are drawn tallest first, each shorter one over it, which reads as a stack:
  // healthy at the bottom, degraded above it, failing on top. A zero count draws no bar.
  const top = (own: number[], sum: (i: number) => number) => own.map((n, i) => (n > 0 ? sum(i) : null));
  const views = rows.map((r) => num(r.viewers.views) ?? 0);
  return {
    columns: [
      rows.map((r) => seconds(r.t)),
      top(failing, (i) => healthy[i] + degraded[i] + failing[i]),
      top(degraded, (i) => healthy[i] + degraded[i]),
      top(healthy, (i) => healthy[i]),
      rows.map((r) => num(r.viewers.playbackFailurePct)),
      rows.map((r) => num(r.viewers.rebufferPct)),
      views,
      rows.map((r) => num(r.probes.p50LatencyMs)),
      rows.map((r) => num(r.viewers.startupTimeMs)),
    ],
    counts: { healthy, degraded, failing },
    empty: rows.every((_, i) => healthy[i] + degraded[i] + failing[i] === 0 && views[i] === 0),
  };
}
