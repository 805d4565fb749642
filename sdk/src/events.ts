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

/**
 * Payload fields per event type; numbers are finite. Fields marked `?` are optional
 * (analytics.md §1, SDK 0.2.0) and, when present, at least 0; every other field is required.
 */
export interface PayloadMap {
  /** `startupMs`: ms from the play intent (the element's first `play`) to the first frame. */
  playback_start: { positionMs: number; durationMs: number; contentId: string; startupMs?: number };
  playback_pause: PositionPayload;
  playback_resume: PositionPayload;
  rebuffer_start: PositionPayload;
  rebuffer_end: PositionPayload;
  /** `from` is `''` for the initial rendition (not a switch); `width` × `height` is the new rendition's size. */
  quality_change: { from: string; to: string; bitrate: number; width?: number; height?: number };
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

/**
 * The batch `context` (analytics.md §1). Limits in characters: `sdk` and `player` 64,
 * `contentId` 256, `src` 2048; `tags` at most 20, keys 1–64, values at most 256.
 */
export interface TelemetryContext {
  /** SDK name and version, e.g. `@service/player-sdk@0.2.0`. */
  sdk?: string;
  /** Playback engine: `hls.js <version>` or `native`. */
  player?: string;
  /** The session's content. */
  contentId?: string;
  /** The manifest URL the player loads. */
  src?: string;
  /** The config's `session.tags`. */
  tags?: Record<string, string>;
}

/** Request body of `POST /api/v1/telemetry`. */
export interface TelemetryBatch {
  apiKey: string;
  sessionId: string;
  events: TelemetryEvent[];
  /** Sent by SDK 0.2.0 in every batch; optional on the wire. */
  context?: TelemetryContext;
}

/** Number, string, boolean, or optional number at least 0. */
type FieldKind = 'n' | 's' | 'b' | 'o';
const POS = { positionMs: 'n', bufferedMs: 'n' } as const;

/** Field name → JSON kind for each type; the wire schema in one table. */
export const SCHEMA: { [K in EventType]: Record<keyof PayloadMap[K], FieldKind> } = {
  playback_start: { positionMs: 'n', durationMs: 'n', contentId: 's', startupMs: 'o' },
  playback_pause: POS,
  playback_resume: POS,
  rebuffer_start: POS,
  rebuffer_end: POS,
  quality_change: { from: 's', to: 's', bitrate: 'n', width: 'o', height: 'o' },
  error: { code: 's', message: 's', fatal: 'b' },
  session_end: { reason: 's', durationMs: 'n' },
};

const MAX_STRING = 1024;

/** A surrogate pair, or a lone surrogate (the only thing the replacement below changes). */
const SURROGATES = /[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]/g;

/**
 * `s` fit for the wire: a lone surrogate becomes U+FFFD (JSON.stringify would send it as an
 * escape the server refuses as invalid JSON, failing the whole batch), then it is cut to at
 * most `max` characters. Characters are code points, as the server counts them, so a cut
 * never splits a pair.
 */
export function cut(s: string, max: number): string {
  s = s.replace(SURROGATES, (m) => (m.length > 1 ? m : '\ufffd'));
  return s.length <= max ? s : Array.from(s).slice(0, max).join('');
}
/**
 * A finite number for the wire: NaN and ±Infinity (a live stream's duration, a
 * position before metadata) become 0, everything else is rounded to an integer.
 */
export const finite = (v: unknown): number =>
  typeof v === 'number' && isFinite(v) ? Math.round(v) : 0;

/**
 * Builds the wire payload of `type` from `payload`: exactly the schema's keys, in
 * schema order, non-finite numbers as 0, strings cut to 1024 characters. An optional
 * field is kept only when it is a finite number of at least 0 (the server refuses a
 * negative one; 0 would be a made-up value). Returns undefined when the type is unknown
 * or a required field is missing or of the wrong JSON type, so one bad custom event can
 * never make the server reject a whole batch.
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
    if (kind === 'o') {
      if (typeof v === 'number' && v >= 0 && v < Infinity) out[key] = Math.round(v);
    } else if (kind === 'n' && typeof v === 'number') out[key] = finite(v);
    else if (kind === 's' && typeof v === 'string') out[key] = cut(v, MAX_STRING);
    else if (kind === 'b' && typeof v === 'boolean') out[key] = v;
    else return undefined;
  }
  if (type === 'session_end' && !/^(ended|unloaded|error)$/.test(out.reason as string)) return undefined;
  return out;
}

/** Millisecond ISO 8601 UTC timestamp, `YYYY-MM-DDTHH:MM:SS.sssZ`. */
export const isoMs = (ms: number): string => new Date(ms).toISOString();
