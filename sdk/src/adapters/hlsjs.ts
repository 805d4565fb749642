//! Maps hls.js level switches to quality_change and hls.js errors to error (and session_end when fatal).

import { finite } from '../events';
import { guard } from '../session';
import type { AdapterContext } from './context';

/** The part of an hls.js instance the SDK uses; a real `Hls` is assignable to it. */
export interface HlsLike {
  on(event: any, listener: any): unknown;
  off(event: any, listener: any): unknown;
  readonly levels?: ReadonlyArray<HlsLevelLike> | null;
  readonly currentLevel?: number;
  /** The loaded manifest URL (`context.src`). */
  readonly url?: string | null;
}

export interface HlsLevelLike {
  width?: number;
  height?: number;
  name?: string;
  bitrate?: number;
}

/** Non-fatal errors with the same code closer together than this are reported once. */
export const ERROR_REPEAT_MS = 5000;

/** Rendition label: `720p` from the height, else the NAME attribute, else `1500k` from the bitrate. */
export function levelLabel(level: HlsLevelLike | undefined, index: number): string {
  if (level && level.height! > 0) return `${level.height}p`;
  if (level && level.name) return String(level.name);
  if (level && level.bitrate! > 0) return `${Math.round(level.bitrate! / 1000)}k`;
  return `level ${index}`;
}

/**
 * Subscribes to `hls`; returns the function that removes both listeners.
 *
 * - quality_change on `Hls.Events.LEVEL_SWITCHED` when the level differs from the one
 *   playing before; the first level (chosen at start-up, or already playing at attach) is
 *   reported with `from: ''`, the initial rendition. `bitrate` is the new level's declared
 *   BANDWIDTH in bit/s; `width` and `height` its RESOLUTION, sent when both are known (> 0).
 * - error on `Hls.Events.ERROR`: code = `data.details`, fatal = `data.fatal`. A fatal error
 *   ends the session with reason `error`; repeats of a non-fatal code within 5 s are skipped.
 */
export function attachHls(hls: HlsLike, ctx: AdapterContext): () => void {
  const events = ((hls as { constructor?: { Events?: Record<string, string> } }).constructor || {}).Events || {};
  const SWITCHED = events.LEVEL_SWITCHED || 'hlsLevelSwitched';
  const ERROR = events.ERROR || 'hlsError';
  const levelAt = (i: number) => (hls.levels || [])[i];
  let index = -1;
  let label = '';
  const lastSeen: Record<string, number> = {};

  const onSwitched = guard(ctx.log, (_e: unknown, data: { level?: number }) => {
    const i = data && data.level;
    if (typeof i !== 'number' || i < 0 || i === index) return;
    const level = levelAt(i) || {};
    const to = levelLabel(level, i);
    const size = level.width! > 0 && level.height! > 0 ? { width: level.width, height: level.height } : {};
    ctx.emit('quality_change', { from: label, to, bitrate: finite(level.bitrate), ...size });
    index = i;
    label = to;
  });

  const onError = guard(ctx.log, (_e: unknown, data: Record<string, any>) => {
    const d = data || {};
    const fatal = d.fatal === true;
    const code = String(d.details || d.type || 'unknown');
    const now = ctx.now();
    if (!fatal && now - lastSeen[code] < ERROR_REPEAT_MS) return;
    lastSeen[code] = now;
    const message = String((d.error && d.error.message) || d.reason || d.type || code);
    ctx.emit('error', { code, message, fatal });
    if (fatal) ctx.end('error');
  });

  hls.on(SWITCHED, onSwitched);
  hls.on(ERROR, onError);
  // A level already playing when attach is called is the initial rendition.
  onSwitched(undefined, { level: hls.currentLevel });
  return () => {
    hls.off(SWITCHED, onSwitched);
    hls.off(ERROR, onError);
  };
}
