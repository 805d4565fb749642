//! Maps HTMLMediaElement events to playback, pause/resume, rebuffer, error and session_end events.

import { finite } from '../events';
import { guard } from '../session';
import type { AdapterContext } from './context';

const MEDIA_ERRORS = ['', 'MEDIA_ERR_ABORTED', 'MEDIA_ERR_NETWORK', 'MEDIA_ERR_DECODE', 'MEDIA_ERR_SRC_NOT_SUPPORTED'];

/** Media time buffered ahead of the playhead, ms (0 when the playhead is outside every range). */
function bufferedAheadMs(v: HTMLMediaElement): number {
  const t = v.currentTime;
  const b = v.buffered;
  for (let i = 0; b && i < b.length; i++) {
    if (b.start(i) <= t && t <= b.end(i)) return finite((b.end(i) - t) * 1000);
  }
  return 0;
}

/**
 * Subscribes to `video`; returns the function that removes every listener it added.
 *
 * - playback_start: the first `playing`, with `startupMs` = the time since the element's first
 *   `play` (the play intent, user or autoplay) on the monotonic clock; without `startupMs` when
 *   that `play` came before `attach`.
 * - playback_pause: `pause` after playback started, except the pause that comes with the
 *   end of the media. playback_resume: the next `play` after such a pause.
 * - rebuffer_start: `waiting` while playing, after playback started, not caused by a seek
 *   (a seek counts until playback is `playing` again). rebuffer_end: the next `playing`;
 *   a pause, a seek or the end of the media during a stall closes it too.
 * - error: `error` on the element, code `MEDIA_ERR_*`. It is fatal (and ends the session)
 *   unless hls.js is attached: hls.js may recover the element and reports its own fatal errors.
 * - session_end: `ended` ends the session with reason `ended`.
 */
export function attachMediaElement(video: HTMLMediaElement, ctx: AdapterContext, withHls: boolean): () => void {
  let started = false;
  /** Monotonic time of the first `play`: the play intent startupMs is measured from. */
  let playAt: number | undefined;
  let paused = false;
  let stalled = false;
  let seeking = false;
  const pos = () => ({ positionMs: finite(video.currentTime * 1000), bufferedMs: bufferedAheadMs(video) });
  const endStall = () => {
    if (stalled) {
      stalled = false;
      ctx.emit('rebuffer_end', pos());
    }
  };
  const handlers: Record<string, () => void> = {
    playing() {
      seeking = false;
      if (!started) {
        started = true;
        ctx.emit('playback_start', {
          positionMs: finite(video.currentTime * 1000),
          durationMs: finite(video.duration * 1000),
          contentId: ctx.contentId,
          // A negative value (a clock without performance.now stepping back) is left out by toWirePayload.
          startupMs: playAt === undefined ? undefined : ctx.now() - playAt,
        });
      } else endStall();
    },
    pause() {
      if (!started || paused || video.ended) return;
      endStall();
      paused = true;
      ctx.emit('playback_pause', pos());
    },
    play() {
      if (playAt === undefined) playAt = ctx.now();
      if (!paused) return;
      paused = false;
      ctx.emit('playback_resume', pos());
    },
    waiting() {
      if (!started || stalled || seeking || video.seeking || video.paused || video.ended) return;
      stalled = true;
      ctx.emit('rebuffer_start', pos());
    },
    seeking() {
      seeking = true;
      endStall();
    },
    ended() {
      endStall();
      ctx.end('ended');
    },
    error() {
      const err = video.error;
      if (!err) return;
      const code = MEDIA_ERRORS[err.code] || `MEDIA_ERR_${err.code}`;
      ctx.emit('error', { code, message: err.message || code, fatal: !withHls });
      if (!withHls) ctx.end('error');
    },
  };
  const bound = Object.keys(handlers).map((name) => [name, guard(ctx.log, handlers[name])] as const);
  for (const [name, fn] of bound) video.addEventListener(name, fn);
  return () => {
    for (const [name, fn] of bound) video.removeEventListener(name, fn);
  };
}
