//! Wire types of the telemetry contract and the one place that turns any event into a valid wire event.

/** The closed set of event types the ingest route accepts. */
export type EventType =
  | 'playback_start'
  | 'playback_pause'
  | 'playback_resume'
  | 'rebuffer_start'
  | 'rebuffer_end'
  | 'quality_change'
  | 'error'
  | 'session_end';

/** Why a session ended. */
export type SessionEndReason = 'ended' | 'unloaded' | 'error';

/** Position and buffer ahead of it, both in milliseconds. */
export interface PositionPayload {
  positionMs: number;
  bufferedMs: number;
}

/** Payload fields per event type. Every field is required; numbers are finite. */
export interface PayloadMap {
  playback_start: { positionMs: number; durationMs: number; contentId: string };
  playback_pause: PositionPayload;
  playback_resume: PositionPayload;
  rebuffer_start: PositionPayload;
  rebuffer_end: PositionPayload;
  quality_change: { from: string; to: string; bitrate: number };
  error: { code: string; message: string; fatal: boolean };
  session_end: { reason: SessionEndReason; durationMs: number };
}

/** One event as sent on the wire. `ts` is `YYYY-MM-DDTHH:MM:SS.sssZ`. */
export type TelemetryEvent = {
  [K in EventType]: { type: K; ts: string; payload: PayloadMap[K] };
}[EventType];

/** An event passed to `emit`; the SDK stamps `ts` itself. */
export type TelemetryEventInput = {
  [K in EventType]: { type: K; payload: PayloadMap[K] };
}[EventType];

/** Request body of `POST /api/v1/telemetry`. */
export interface TelemetryBatch {
  apiKey: string;
  sessionId: string;
  events: TelemetryEvent[];
}

type FieldKind = 'n' | 's' | 'b';
const POS = { positionMs: 'n', bufferedMs: 'n' } as const;

/** Field name → JSON kind for each type; the wire schema in one table. */
export const SCHEMA: { [K in EventType]: Record<keyof PayloadMap[K], FieldKind> } = {
  playback_start: { positionMs: 'n', durationMs: 'n', contentId: 's' },
  playback_pause: POS,
  playback_resume: POS,
  rebuffer_start: POS,
  rebuffer_end: POS,
  quality_change: { from: 's', to: 's', bitrate: 'n' },
  error: { code: 's', message: 's', fatal: 'b' },
  session_end: { reason: 's', durationMs: 'n' },
};

const MAX_STRING = 1024;

/**
 * A finite number for the wire: NaN and ±Infinity (a live stream's duration, a
 * position before metadata) become 0, everything else is rounded to an integer.
 */
export const finite = (v: unknown): number =>
  typeof v === 'number' && isFinite(v) ? Math.round(v) : 0;

/**
 * Builds the wire payload of `type` from `payload`: exactly the schema's keys, in
 * schema order, non-finite numbers as 0, strings cut to 1024 characters. Returns
 * undefined when the type is unknown or a field is missing or of the wrong JSON type,
 * so one bad custom event can never make the server reject a whole batch.
 */
export function toWirePayload(type: string, payload: unknown): Record<string, unknown> | undefined {
  const fields = (SCHEMA as Record<string, Record<string, FieldKind>>)[type];
  if (!fields || !Object.prototype.hasOwnProperty.call(SCHEMA, type) || !payload || typeof payload !== 'object') {
    return undefined;
  }
  const src = payload as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const key in fields) {
    const v = src[key];
    const kind = fields[key];
    if (kind === 'n' && typeof v === 'number') out[key] = finite(v);
    else if (kind === 's' && typeof v === 'string') out[key] = v.slice(0, MAX_STRING);
    else if (kind === 'b' && typeof v === 'boolean') out[key] = v;
    else return undefined;
  }
  if (type === 'session_end' && !/^(ended|unloaded|error)$/.test(out.reason as string)) return undefined;
  return out;
}

/** Millisecond ISO 8601 UTC timestamp, `YYYY-MM-DDTHH:MM:SS.sssZ`. */
export const isoMs = (ms: number): string => new Date(ms).toISOString();
