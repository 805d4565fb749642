//! The `context` of every batch (analytics.md §1): which SDK, which player, what is played,
//! from which manifest, with which tags; always within the server's limits, so it can never
//! get a batch refused.

import { cut, type TelemetryContext } from './events';

/** This package's version; a test checks it against package.json. */
export const SDK_VERSION = '0.2.0';

/** `context.sdk`: package name and version. */
export const SDK_NAME = `@service/player-sdk@${SDK_VERSION}`;

/** The server's limits on `context`, in characters (code points). */
export const CONTEXT_LIMITS = { player: 64, contentId: 256, src: 2048, tags: 20, tagKey: 64, tagValue: 256 };

/**
 * `session.tags` as the server accepts them, in the caller's order: entries with a string
 * value and a non-empty key, keys cut to 64 and values to 256 characters (a key that
 * collides with an earlier one after the cut is skipped), the first 20 kept.
 */
export function wireTags(tags: unknown): Record<string, string> {
  // No prototype: a tag named `__proto__` stays an ordinary entry.
  const out: Record<string, string> = Object.create(null);
  let n = 0;
  if (!tags || typeof tags !== 'object') return out;
  for (const k of Object.keys(tags)) {
    const v = (tags as Record<string, unknown>)[k];
    const key = cut(k, CONTEXT_LIMITS.tagKey);
    if (n === CONTEXT_LIMITS.tags) break;
    if (!key || typeof v !== 'string' || key in out) continue;
    out[key] = cut(v, CONTEXT_LIMITS.tagValue);
    n++;
  }
  return out;
}

/** `context.player`: `hls.js <Hls.version>` with an hls.js instance, else `native`. */
export function playerName(hls: object | undefined): string {
  if (!hls) return 'native';
  const v = (hls.constructor as { version?: unknown } | undefined)?.version;
  return typeof v === 'string' && v ? `hls.js ${v}` : 'hls.js';
}

/**
 * `context.src`: the manifest URL the player loads, hls.js's `url`, else the element's
 * `currentSrc`. '' when not known yet, or a `blob:` URL (media source extensions), which
 * names no manifest and would become the view's src for good (the first non-empty one counts).
 */
export function manifestUrl(video: HTMLMediaElement, hls?: { url?: string | null }): string {
  const u = hls ? hls.url : video.currentSrc;
  return typeof u === 'string' && !/^blob:/i.test(u) ? u : '';
}

/**
 * The context of one batch: every field the SDK knows, a field with no value (no player
 * attached yet, no contentId, src not known yet, no tags) left out; `tags` must come from
 * `wireTags`.
 */
export function wireContext(contentId: string, tags: Record<string, string>, player: string, src: string): TelemetryContext {
  const c: TelemetryContext = { sdk: SDK_NAME };
  if (player) c.player = cut(player, CONTEXT_LIMITS.player);
  if (contentId) c.contentId = cut(contentId, CONTEXT_LIMITS.contentId);
  if (src) c.src = cut(src, CONTEXT_LIMITS.src);
  if (Object.keys(tags).length) c.tags = tags;
  return c;
}
