//! Public entry of @service/player-sdk: `createTelemetry` and the wire types.

import { resolveConfig, MAX_BUFFERED_EVENTS, type TelemetryConfig } from './config';
import {
  isoMs,
  toWirePayload,
  type EventType,
  type SessionEndReason,
  type TelemetryEvent,
  type TelemetryEventInput,
} from './events';
import { guard, makeLog, monotonicClock, newSessionId } from './session';
import { Batcher } from './transport/batcher';
import { byteLength, postBatch } from './transport/send';
import { attachMediaElement } from './adapters/media-element';
import { attachHls, type HlsLike } from './adapters/hlsjs';
import type { AdapterContext } from './adapters/context';
import { manifestUrl, playerName, wireContext } from './batch-context';

export type { TelemetryConfig } from './config';
export type {
  EventType,
  PayloadMap,
  PositionPayload,
  SessionEndReason,
  TelemetryBatch,
  TelemetryContext,
  TelemetryEvent,
  TelemetryEventInput,
} from './events';
export type { HlsLike, HlsLevelLike } from './adapters/hlsjs';

/** Options of `attach`. */
export interface AttachOptions {
  /** The hls.js instance playing into the element, for quality_change and hls.js errors. */
  hls?: HlsLike;
}

/** Read-only handle of one telemetry session. */
export interface TelemetryHandle {
  /** Random id of this session, sent in every batch. */
  readonly sessionId: string;
  /** Buffers one event (one of the eight types, payload as on the wire); invalid events are dropped. */
  emit(event: TelemetryEventInput): void;
  /** Subscribes to a media element and optionally an hls.js instance; returns detach. */
  attach(video: HTMLMediaElement, opts?: AttachOptions): () => void;
  /**
   * Emits `session_end` (reason `ended` by default), sends everything buffered and stops the
   * session. The promise settles when that send has settled; it never rejects.
   */
  end(reason?: SessionEndReason): Promise<void>;
}

const noop = () => {};
const done = () => Promise.resolve();
const perfNow = (): number => {
  const p = (globalThis as { performance?: Performance }).performance;
  return p && typeof p.now === 'function' ? p.now() : Date.now();
};

/**
 * Starts a telemetry session. Never throws: with an unusable config it logs one console
 * warning and returns a handle that does nothing.
 */
export function createTelemetry(config: TelemetryConfig): TelemetryHandle {
  const sessionId = newSessionId();
  try {
    const cfg = resolveConfig(config);
    if (typeof cfg === 'string') throw new Error(cfg);
    return start(cfg, sessionId);
  } catch (e) {
    try {
      console.warn('[player-sdk] telemetry disabled:', e);
    } catch {
      // no console
    }
    return Object.freeze({ sessionId, emit: noop, attach: () => noop, end: done });
  }
}

function start(cfg: Exclude<ReturnType<typeof resolveConfig>, string>, sessionId: string): TelemetryHandle {
  const { apiKey, ingestUrl } = cfg;
  const log = makeLog(cfg.debug);
  const clock = monotonicClock();
  const startedAt = perfNow();
  const detachers = new Set<() => void>();
  let ended = false;
  // Set by the latest attach and kept after detach: buffered events still belong to that playback.
  let player = '';
  let source = (): string => '';
  // Built per batch: src becomes known (or changes) while the session runs.
  const body = (events: TelemetryEvent[]): string =>
    JSON.stringify({ apiKey, sessionId, events, context: wireContext(cfg.contentId, cfg.tags, player, guard(log, source)() || '') });

  const batcher = new Batcher({
    maxBatchSize: cfg.maxBatchSize,
    flushIntervalMs: cfg.flushIntervalMs,
    maxBuffered: MAX_BUFFERED_EVENTS,
    envelopeBytes: () => byteLength(body([])),
    send: (events) => postBatch(ingestUrl, apiKey, body(events), log),
    log,
  });

  const push = (type: EventType, payload: unknown): void => {
    if (ended) return log(`session ended, ${type} ignored`);
    const wire = toWirePayload(type, payload);
    if (!wire) return log('invalid event dropped', type, payload);
    batcher.push({ type, ts: isoMs(clock()), payload: wire } as never);
  };

  const win = typeof window !== 'undefined' ? window : undefined;
  const doc = typeof document !== 'undefined' ? document : undefined;
  // The page is going away (or may be killed while hidden, as mobile browsers do):
  // send now with keepalive, the only beacon-safe path for a request carrying
  // an Authorization header (navigator.sendBeacon cannot set headers).
  const onPageHide = guard(log, () => void end('unloaded'));
  const onVisibility = guard(log, () => {
    if (doc && doc.visibilityState === 'hidden') void batcher.flush(true);
  });
  if (win) win.addEventListener('pagehide', onPageHide);
  if (doc) doc.addEventListener('visibilitychange', onVisibility);

  const end = (reason?: SessionEndReason): Promise<void> => {
    if (ended) return done();
    const r: SessionEndReason = reason === 'unloaded' || reason === 'error' ? reason : 'ended';
    push('session_end', { reason: r, durationMs: perfNow() - startedAt });
    ended = true;
    for (const d of detachers) d();
    if (win) win.removeEventListener('pagehide', onPageHide);
    if (doc) doc.removeEventListener('visibilitychange', onVisibility);
    batcher.close();
    return batcher.flush(true);
  };

  const attach = (video: HTMLMediaElement, opts?: AttachOptions): (() => void) => {
    if (ended || !video || typeof video.addEventListener !== 'function') {
      log('attach ignored: session ended or not a media element');
      return noop;
    }
    const ctx: AdapterContext = { emit: push, end, contentId: cfg.contentId, log, now: perfNow };
    const hls = opts && opts.hls;
    player = playerName(hls);
    source = () => manifestUrl(video, hls);
    const offs = [attachMediaElement(video, ctx, !!hls)];
    if (hls) offs.push(attachHls(hls, ctx));
    const detach = guard(log, () => {
      detachers.delete(detach);
      for (const off of offs.splice(0)) off();
    });
    detachers.add(detach);
    return detach;
  };

  return Object.freeze({
    sessionId,
    emit: guard(log, (event: TelemetryEventInput) => push(event && event.type, event && event.payload)),
    attach: (video: HTMLMediaElement, opts?: AttachOptions) => guard(log, attach)(video, opts) || noop,
    end: (reason?: SessionEndReason) => guard(log, end)(reason) || done(),
  });
}
