//! Telemetry configuration: the contract's shape, its defaults and limits, and validation.

import { wireTags } from './batch-context';

/** Configuration passed to `createTelemetry`. */
export interface TelemetryConfig {
  /** API key minted in the dashboard (`svc_…`); sent as bearer and in the body. */
  apiKey: string;
  /** Full URL of the ingest route, e.g. `https://host/api/v1/telemetry`. */
  ingestUrl: string;
  session?: {
    /** Identifies the content played; sent in `playback_start` and `context.contentId`. Default `''`. */
    contentId?: string;
    /**
     * Free-form labels of the session, sent as `context.tags` in every batch: at most 20
     * (the first ones), keys cut to 64 and values to 256 characters; entries with an empty
     * key or a value that is not a string are left out.
     */
    tags?: Record<string, string>;
  };
  options?: {
    /** Send a batch at least this often, in ms. Default 10000, at least 100. */
    flushIntervalMs?: number;
    /** Send a batch once this many events are buffered. Default 50, 1 to 1000. */
    maxBatchSize?: number;
    /** Log dropped events, rejected batches and SDK faults to the console. Default false. */
    debug?: boolean;
  };
}

/** Configuration after defaults and limits were applied. */
export interface ResolvedConfig {
  apiKey: string;
  ingestUrl: string;
  contentId: string;
  tags: Record<string, string>;
  flushIntervalMs: number;
  maxBatchSize: number;
  debug: boolean;
}

export const DEFAULT_FLUSH_INTERVAL_MS = 10_000;
export const DEFAULT_MAX_BATCH_SIZE = 50;
/** The server refuses batches of more than 1000 events. */
export const MAX_BATCH_SIZE = 1000;
/**
 * Events held in memory at most (waiting to be sent plus waiting for a retry).
 * When full the oldest are dropped first and counted.
 */
export const MAX_BUFFERED_EVENTS = 1000;

const num = (v: unknown, dflt: number, min: number, max: number): number =>
  typeof v === 'number' && isFinite(v) ? Math.min(max, Math.max(min, Math.floor(v))) : dflt;

/** Applies defaults and limits; returns an error text when the config cannot work. */
export function resolveConfig(config: TelemetryConfig): ResolvedConfig | string {
  if (!config || typeof config !== 'object') return 'config must be an object';
  const { apiKey, ingestUrl } = config;
  if (typeof apiKey !== 'string' || !apiKey) return 'apiKey must be a non-empty string';
  if (typeof ingestUrl !== 'string' || !ingestUrl) return 'ingestUrl must be a non-empty string';
  const s = config.session || {};
  const o = config.options || {};
  return {
    apiKey,
    ingestUrl,
    contentId: typeof s.contentId === 'string' ? s.contentId : '',
    tags: wireTags(s.tags),
    flushIntervalMs: num(o.flushIntervalMs, DEFAULT_FLUSH_INTERVAL_MS, 100, 2 ** 31 - 1),
    maxBatchSize: num(o.maxBatchSize, DEFAULT_MAX_BATCH_SIZE, 1, MAX_BATCH_SIZE),
    debug: o.debug === true,
  };
}
